"""The real parser decides what `build` refuses (issue 33): where TensorRT-RTX is installed, `check`'s
prediction is advice, a rewrite whose proof fails steps aside, and only the real parser's (and CPU-only
builder's) refusal refuses, naming both reasons when neither form builds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import bool_equal_model, dcn_model, int32_relu_model, ms_gelu_model
from click.testing import CliRunner
from fused_builders import Case, In
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.rewrites.cleanup import INT32_OK_INPUTS
from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


def _build(*args: object):
    return CliRunner().invoke(cli, ["build", *[str(a) for a in args]])


def _error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.startswith("trtconv: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_a_refusal_only_check_predicts_builds_and_is_recorded(tmp_path):
    """`check --trt rtx` refuses Equal on BOOL inputs (exit 5); RTX's own parser and builder take it, so
    build exits 0 and records the disagreement in --json and the manifest."""
    model = bool_equal_model(tmp_path / "eq.onnx")
    predicted = CliRunner().invoke(cli, ["check", "--trt", "rtx", str(model)])
    assert predicted.exit_code == ExitCode.UNSUPPORTED, predicted.output  # the prediction really refuses
    engine = tmp_path / "eq.engine"
    res = _build("--trt", "rtx", model, "-o", engine, "--json", "--report", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    [d] = doc["parser_disagreements"]
    assert (d["node"], d["op"]) == ("masks_equal", "Equal")
    assert d["predicted"].startswith("unsupported: ") and "BOOL" in d["predicted"]
    assert d["real"].startswith("parsed and built by tensorrt_rtx ")
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    assert manifest["parser_disagreements"] == [d]
    stages = {s["name"]: s for s in doc["stages"]}
    assert stages["check"]["decided_by"] == "tensorrt_rtx" and stages["recheck"]["parser_disagreements"] == [d]
    assert engine.stat().st_size > 0
    page = (tmp_path / "r.html").read_text()
    assert 'id="parser-disagreements"' in page and "masks_equal" in page and "parsed and built by" in page
    human = _build("--trt", "rtx", model, "-o", tmp_path / "h.engine")
    assert human.exit_code == 0, human.output
    assert "check predicted a refusal of masks_equal (Equal); the real parser took it" in human.stdout


def test_a_rejection_check_did_not_predict_is_recorded_too(tmp_path):
    """`check --trt rtx` takes Relu on INT32; RTX's parser rejects it in the build stage (exit 6): the miss
    is recorded in --json (the build's error stays the parser's own)."""
    model = int32_relu_model(tmp_path / "r.onnx")
    assert CliRunner().invoke(cli, ["check", "--trt", "rtx", str(model)]).exit_code == 0  # predicted fine
    res = _build("--trt", "rtx", model, "-o", tmp_path / "r.engine", "--json")
    assert res.exit_code == ExitCode.BUILD_FAILED, res.output
    doc = json.loads(res.stdout)
    [d] = doc["parser_disagreements"]
    assert (d["node"], d["op"], d["predicted"]) == ("int_relu", "Relu", "supported")
    assert d["real"].startswith("rejected by tensorrt_rtx ") and "INT32" in d["real"]
    assert doc["error"]["exit_code"] == ExitCode.BUILD_FAILED and doc["engine"] is None


def test_without_the_target_installed_the_prediction_decides(tmp_path):
    """TensorRT 11.4 is not installed here: the same model is refused on the prediction (exit 5)."""
    try:
        import tensorrt  # noqa: F401
        pytest.skip("TensorRT is installed: its parser would decide")
    except ImportError:
        pass
    res = _build("--trt", "11.4", bool_equal_model(tmp_path / "eq.onnx"), "-o", tmp_path / "eq.engine")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "TensorRT 11.4 cannot parse 1 node(s)" in _error_line(res) and "masks_equal (Equal)" in res.stderr


def test_a_rewrite_whose_proof_fails_steps_aside_where_the_parser_takes_the_original(tmp_path):
    """ms-gelu's replacement differs from ONNX Runtime's Gelu by ~6e-8, over a tolerance of 1e-12: the
    rewrite steps aside (said on stderr, in --json and the manifest), the node stays, RTX builds it."""
    engine = tmp_path / "g.engine"
    res = _build("--trt", "rtx", ms_gelu_model(tmp_path / "g.onnx"), "-o", engine, "--tolerance", "1e-12", "--json",
                 "--keep-prepared", "--report", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    assert "ms-gelu stepped aside, its proof failed: max abs error" in res.stderr
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    [aside] = stages["rewrite"]["stepped_aside"]
    assert (aside["node"], aside["rule"]) == ("gelu0", "ms-gelu") and "max abs error" in aside["reason"]
    assert stages["rewrite"]["rewritten"] == 0
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    assert manifest["rewrites_stepped_aside"] == [aside] and manifest["rewrites"] == []
    prepared = onnx.load(tmp_path / "g.prepared.onnx")
    assert [(n.domain, n.op_type) for n in prepared.graph.node] == [("com.microsoft", "Gelu")]
    page = (tmp_path / "r.html").read_text()
    assert 'id="stepped-aside"' in page and "ms-gelu" in page


def test_a_proof_that_cannot_run_steps_aside_too(tmp_path):
    """bfloat16 com.microsoft::Gelu: no proof can run it on ONNX Runtime's CPU; RTX's parser takes it."""
    res = _build("--trt", "rtx", ms_gelu_model(tmp_path / "g.onnx", TensorProto.BFLOAT16), "-o", tmp_path / "g.engine",
                 "--json")
    assert res.exit_code == 0, res.output
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    [aside] = stages["rewrite"]["stepped_aside"]
    assert aside["node"] == "gelu0" and aside["rule"] == "ms-gelu"


def test_neither_form_builds_the_refusal_names_both_reasons(tmp_path):
    """DCNv2's plugin-free rewrite fails its proof at 1e-12 and steps aside; RTX's parser rejects the
    DCNv2 node as it is (no plugins): exit 5, one line with both reasons, nothing written."""
    out = tmp_path / "out"
    out.mkdir()
    res = _build("--trt", "rtx", dcn_model(tmp_path / "dcn.onnx"), "-o", out / "d.engine", "--tolerance", "1e-12")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    line = _error_line(res)
    assert "TensorRT-RTX's parser (tensorrt_rtx" in line and "dcn0 (DCNv2)" in line
    assert "Plugin not found" in line  # the real parser's reason for the original form
    assert "its rewrite by dcnv2-centernet failed its proof (max abs error" in line  # the rewrite's
    assert list(out.iterdir()) == []
    assert "Traceback" not in res.output


def test_a_wrong_engine_refusal_is_never_the_parsers_to_overrule(tmp_path):
    """com.microsoft::RotaryEmbedding parses and builds on RTX as ONNX's RotaryEmbedding, which computes
    something else: when its rewrite steps aside, the build refuses although the parser would build."""
    rng = np.random.default_rng(0)
    cos, sin = (rng.standard_normal((16, 4)).astype(np.float32) for _ in range(2))
    case = Case("RotaryEmbedding", [In("x", (1, 2, 4, 8)), In("p", (1, 4), TensorProto.INT64),
                                    In("cos", value=cos), In("sin", value=sin)])
    model = tmp_path / "rot.onnx"
    onnx.save(case.model(), model)
    res = _build("--trt", "rtx", model, "-o", tmp_path / "r.engine", "--tolerance", "1e-12")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    line = _error_line(res)
    assert "would still reject 1 node(s)" in line and "domain" in line and "failed its proof" in line


def _int32_case(op: str, index: int) -> tuple[list, list, list[int]]:
    """A model where input ``index`` of ``op`` is an INT32 initializer, as the int64-to-int32 clean-up
    leaves it."""
    arr = numpy_helper.from_array
    cases = {
        ("Gather", 1): ([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
                        [arr(np.array([0, 2], np.int32), "i")], [4, 3]),
        ("GatherElements", 1): ([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
                                [arr(np.array([[0, 1, 2], [2, 1, 0], [1, 1, 1]], np.int32), "i")], [3, 3]),
        ("ScatterElements", 1): ([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)],
                                 [arr(np.array([[0, 1, 2]], np.int32), "i"), arr(np.ones((1, 3), np.float32), "u")],
                                 [3, 3]),
        ("OneHot", 0): ([helper.make_node("OneHot", ["i", "d", "v"], ["o"]), helper.make_node("Add", ["x", "o"], ["y"])],
                        [arr(np.array([0, 2, 1], np.int32), "i"), arr(np.array(3, np.int64), "d"),
                         arr(np.array([0, 1], np.float32), "v")], [3, 3]),
    }
    return cases[(op, index)]


def test_every_input_the_int32_clean_up_narrows_is_one_tensorrt_rtx_takes(tmp_path):
    """The TensorRT side of "no clean-up leaves a node TensorRT cannot run where the original could":
    each (op, input) INT32_OK_INPUTS lets the clean-up narrow parses and builds with an INT32 initializer
    there (ONNX Runtime's side is the step-aside of tests/rewrites/test_step_aside.py). A new entry
    needs its case here."""
    trt = import_tensorrt(RTX_MODULE)
    for op, index in sorted(INT32_OK_INPUTS):
        nodes, inits, shape = _int32_case(op, index)
        g = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_value_info("y", helper.make_tensor_type_proto(TensorProto.FLOAT, None))],
                              initializer=inits)
        path = tmp_path / f"{op}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
        verdict = parse_and_build(path, trt)
        assert verdict.parsed and verdict.built, (op, index, verdict)
