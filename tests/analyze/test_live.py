"""check --live: the real parser's answer next to the prediction, node by node (TensorRT-RTX runs on the CPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trtconv.analyze import analyze
from trtconv.analyze.live import compare_live
from trtconv.load import load_model
from trtconv.trt.realparse import RTX_MODULE, run_isolated

pytestmark = pytest.mark.skipif(importlib.util.find_spec(RTX_MODULE) is None, reason="tensorrt_rtx is not installed")
F = TensorProto.FLOAT


def test_nodes_get_both_answers(tmp_path):
    nodes = [helper.make_node("LpPool", ["x"], ["p"], kernel_shape=[2, 2], p=3, name="lp3"),
             helper.make_node("Relu", ["p"], ["r"], name="relu"),
             helper.make_node("Det", ["r2"], ["y"], name="det"),
             helper.make_node("Reshape", ["r", "shape"], ["r2"], name="reshape")]
    shape = onnx.numpy_helper.from_array(__import__("numpy").array([3, 3], dtype="int64"), "shape")
    g = helper.make_graph([nodes[0], nodes[1], nodes[3], nodes[2]], "g",
                          [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", F, None)], [shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = Path(tmp_path / "m.onnx")
    onnx.save(m, str(path))
    report = analyze(load_model(path, structure_only=True), "rtx")
    live = compare_live(report, run_isolated(path, RTX_MODULE, build=True, timeout=120)).live
    assert live is not None and live.parse == "reject" and live.build is None and live.agrees
    by_path = {n.path: n for n in live.nodes}
    assert by_path["lp3"].agrees is True and by_path["lp3"].parser.startswith("rejected: ")
    assert by_path["det"].agrees is True and by_path["det"].predicted == "unsupported"
    assert "relu" not in by_path  # no prediction and no parser error: nothing to compare
