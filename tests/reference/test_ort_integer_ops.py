"""ONNX Runtime's integer ops of int8 weights, as trtconv's reference runs them, compute what they define on every
x86 CPU. On AVX2 without VNNI (this project's CI machines have been both kinds) ORT's uint8 x int8 products
saturate in an int16 multiply-add when the graph runs as written: a DynamicQuantizeMatMul came out 11.3 off where
the activations' rounding allows 0.07, so the proofs of the rewrites replacing DynamicQuantizeMatMul,
MatMulIntegerToFloat, DynamicQuantizeLSTM and QAttention failed there and the rewrites stepped aside."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.reference.ort import run_model


@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_int8_weight_products_are_exact_as_written(op):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(8, 128)).astype(np.float32)
    b = rng.integers(-127, 128, size=(128, 16)).astype(np.int8)
    scale = np.array(0.01, np.float32)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scale, "s")]
    if op == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(op, ["a", "b", "s"], ["y"], domain="com.microsoft")]
    else:  # the activation quantized in the graph, as ONNX Runtime's dynamic quantizer writes it
        nodes = [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
                 helper.make_node(op, ["aq", "b", "as", "s", "az"], ["y"], domain="com.microsoft")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    got = run_model(m, {"a": a})["y"]
    # the definition: a rounded to uint8 on its own range (the only rounding), exact integer products
    lo, hi = min(0.0, float(a.min())), max(0.0, float(a.max()))
    sa = (hi - lo) / 255
    za = np.clip(np.round(-lo / sa), 0, 255)
    aq = np.clip(np.round(a / sa) + za, 0, 255)
    want = ((aq - za) @ b.astype(np.float64)) * sa * float(scale)
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max(), np.abs(got - want).max()
