"""Random small graphs: whatever mix of FP16 and FP32 nodes the rules pick, the result is valid and close.

The invariants are the converter's contract: onnx.checker passes, ONNX Runtime loads and
runs it, graph I/O types are unchanged, and the outputs match FP32 within FP16 rounding.
"""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from trtconv.precision.fp16 import Fp16Settings, convert_fp16
from trtconv.reference import ort

UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Identity")
BINARY = ("Add", "Mul", "Sub", "Max", "Min")


@st.composite
def graphs(draw):
    """A chain of unary/binary ops over [2, 6] tensors; binaries take an earlier tensor or a constant."""
    n = draw(st.integers(2, 8))
    nodes, inits, tensors = [], [], ["x"]
    for i in range(n):
        kind = draw(st.sampled_from(["unary", "binary", "concat_slice"]))
        out = f"t{i}"
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [tensors[-1]], [out], name=f"n{i}"))
        elif kind == "binary":
            if draw(st.booleans()):
                other = draw(st.sampled_from(tensors))
            else:
                other = f"c{i}"
                val = draw(st.floats(-3, 3, allow_nan=False, width=32))
                inits.append(numpy_helper.from_array(np.full([6], val, np.float32), other))
            nodes.append(helper.make_node(draw(st.sampled_from(BINARY)), [tensors[-1], other], [out], name=f"n{i}"))
        else:  # Concat with an earlier tensor, then Slice back to [2, 6]: mixed-type inputs and int shape inputs
            other = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node("Concat", [tensors[-1], other], [out + "_cat"], name=f"n{i}_cat", axis=1))
            for name, vals in (("starts", [0]), ("ends", [6]), ("axes", [1])):
                inits.append(numpy_helper.from_array(np.array(vals, np.int64), f"{name}{i}"))
            nodes.append(helper.make_node("Slice", [out + "_cat", f"starts{i}", f"ends{i}", f"axes{i}"], [out],
                                          name=f"n{i}"))
        tensors.append(out)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info(tensors[-1], TensorProto.FLOAT, [2, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    names = [nd.name for nd in nodes]
    excluded = tuple(draw(st.lists(st.sampled_from(names), max_size=3, unique=True)))
    return model, excluded


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.booleans())
def test_any_fp16_fp32_mix_is_valid_and_close(case, keep_io):
    model, excluded = case
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(0).uniform(-2, 2, (2, 6)).astype(np.float32)
    res = convert_fp16(model, Fp16Settings(exclude_nodes=excluded, keep_io_types=keep_io))
    onnx.checker.check_model(res.model, full_check=True)
    assert {k.name for k in res.report.kept} == set(excluded)
    want = np.float32 if keep_io else np.float16
    out = ort.run_model(res.model, {"x": x.astype(want)})
    ref = ort.run_model(model, {"x": x})
    (name, got), = out.items()
    assert got.dtype == want
    np.testing.assert_allclose(got.astype(np.float32), ref[name], rtol=2e-2, atol=2e-2)
