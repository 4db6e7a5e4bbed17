"""The real ONNX parser as data: TensorRT-RTX parses and builds on the CPU, so these run without a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build, run_isolated

pytestmark = pytest.mark.skipif(importlib.util.find_spec(RTX_MODULE) is None, reason="tensorrt_rtx is not installed")
F = TensorProto.FLOAT


def _save(tmp_path: Path, nodes, inputs, outputs, inits=(), name="m.onnx") -> Path:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / name))
    return tmp_path / name


def test_parse_and_build_accepts_a_real_model_with_a_profile(ocr_cls):
    trt = import_tensorrt(RTX_MODULE)
    square = parse_and_build(Path(ocr_cls), trt, shapes={"x": (1, 3, 48, 48)})
    assert square.parsed and square.built and not square.parser_errors
    # H and W share the dim name '?': a non-square profile contradicts it (issue 17's PP-OCR cls finding)
    wide = parse_and_build(Path(ocr_cls), trt, shapes={"x": (1, 3, 48, 192)})
    assert wide.parsed and wide.built is False and "contradictory" in " ".join(wide.build_errors)


def test_parser_errors_name_the_node_and_the_reason(tmp_path):
    p = _save(tmp_path, [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3, name="pool")],
              [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])], [helper.make_tensor_value_info("y", F, None)])
    v = parse_and_build(p, import_tensorrt(RTX_MODULE))
    assert not v.parsed and v.built is None
    assert [(e.node, e.op_type) for e in v.parser_errors] == [(0, "LpPool")] and "L1 and L2" in v.parser_errors[0].desc


def test_run_isolated_survives_a_failing_build_and_reports_both_phases(tmp_path):
    w = numpy_helper.from_array(np.zeros((1, 16, 2), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((1, 16, 4), np.float32), "R")

    def branch(tag):
        return helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["", f"{tag}_h"], hidden_size=4)], tag,
                                 [], [helper.make_tensor_value_info(f"{tag}_h", F, None)])

    nodes = [helper.make_node("Greater", ["flag", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("t"), else_branch=branch("e"))]
    p = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", F, [3, 1, 2]),
                                helper.make_tensor_value_info("flag", F, [])],
              [helper.make_tensor_value_info("y", F, None)],
              [w, r, numpy_helper.from_array(np.array(0, np.float32), "zero")])
    v = run_isolated(p, RTX_MODULE, build=True, timeout=120)
    assert v["parsed"] is True and v["built"] is False and "graphScope" in " ".join(v["build_errors"])


def test_a_profile_may_be_a_min_opt_max_range_in_process_and_isolated(tmp_path):
    """`build`'s recheck asks with its first profile: a range where min > max is the builder's refusal;
    a sound one builds (so the range, not one shape, reached the profile)."""
    p = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [1, "n"])],
              [helper.make_tensor_value_info("y", F, [1, "n"])])
    sound = {"x": {"min": [1, 2], "opt": [1, 4], "max": [1, 8]}}
    bad = {"x": {"min": [1, 8], "opt": [1, 4], "max": [1, 2]}}
    trt = import_tensorrt(RTX_MODULE)
    assert parse_and_build(p, trt, shapes=sound).built is True
    assert parse_and_build(p, trt, shapes=bad).built is False
    isolated = run_isolated(p, RTX_MODULE, build=True, shapes=bad)
    assert isolated["parsed"] and isolated["built"] is False and isolated["build_errors"]
