"""``trtconv check`` through the CLI: exit codes, JSON schema, one-line load errors."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import audio_conv_model
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

F = TensorProto.FLOAT


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def error_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("trtconv: error:")]


def _custom_op_model(tmp_path: Path) -> Path:
    g = helper.make_graph([helper.make_node("MyOp", ["x"], ["y"], domain="acme", name="[b]mine")], "g",
                          [helper.make_tensor_value_info("x", F, ["N", 4])], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    p = tmp_path / "custom.onnx"
    onnx.save_model(m, str(p))
    return p


def _external_model(tmp_path: Path, location: str) -> Path:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [1, 64])], [helper.make_tensor_value_info("y", F, [1, 64])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "ext.onnx"
    onnx.save_model(m, str(p), save_as_external_data=True, location="w.bin", size_threshold=0)
    m2 = onnx.load(str(p), load_external_data=False)
    for e in m2.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    onnx.save_model(m2, str(p))
    return p


def test_supported_real_model_exits_0_with_table_and_summary(ocr_cls):
    res = run("check", str(ocr_cls), "--trt", "11.4")
    assert res.exit_code == ExitCode.OK, res.output
    assert "SUPPORTED" in res.stdout and "1 dynamic input (1 not covered by --shapes)" in res.stdout
    assert res.stderr == ""


def test_json_schema_on_real_model(ocr_det):
    res = run("check", str(ocr_det), "--json", "--trt", "10.16", "--shapes", "x:1x3x640x640")
    assert res.exit_code == ExitCode.OK
    doc = json.loads(res.stdout)
    assert doc["schema"] == "trtconv.check/1" and doc["target"] == {"tensorrt": "10.16"}
    assert doc["verdict"] == "supported" and doc["exit_code"] == 0 and doc["nodes"] == []
    assert doc["summary"]["supported"] == doc["summary"]["nodes"] > 500
    assert doc["inputs"] == [{"name": "x", "dtype": "FLOAT", "dims": doc["inputs"][0]["dims"], "dynamic": True,
                              "shape": [1, 3, 640, 640], "covered": True}]


def test_unsupported_real_model_exits_5_with_json_nodes(silero):
    res = run("check", str(silero), "--json", "--trt", "rtx")
    assert res.exit_code == ExitCode.UNSUPPORTED
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "unsupported" and doc["exit_code"] == 5 and doc["stage"] == "builder"
    node = next(n for n in doc["nodes"] if n["status"] == "unsupported")
    assert set(node) == {"path", "op_type", "domain", "status", "rewrite", "source", "findings"}
    f = node["findings"][0]
    assert f["rule"] == "rnn-in-if" and f["stage"] == "builder" and f["hint"] and "measured" in node["source"]


def test_custom_op_exits_4(tmp_path):
    res = run("check", str(_custom_op_model(tmp_path)), "--trt", "11.4")
    assert res.exit_code == ExitCode.NEEDS_REWRITE
    assert "acme::MyOp" in res.stdout and "NEEDS-REWRITE" in res.stdout
    assert "[b]mine" in res.stdout  # node names are printed literally, not as rich markup


def test_bad_flags_are_usage_errors(tmp_path):
    p = _custom_op_model(tmp_path)
    assert run("check", str(p), "--trt", "9.0").exit_code == ExitCode.USAGE
    res = run("check", str(p), "--shapes", "nope:1x4")
    assert res.exit_code == ExitCode.USAGE and len(error_lines(res)) == 1
    assert run("check", str(p), "--shapes", "x=1").exit_code == ExitCode.USAGE


def _corrupt(tmp_path, src):
    p = tmp_path / "corrupt.onnx"
    data = bytearray(src.read_bytes())
    data[10:4000] = b"\xff" * 3990
    p.write_bytes(bytes(data))
    return p


def _truncated(tmp_path, src):
    p = tmp_path / "truncated.onnx"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 3])
    return p


def _not_onnx(tmp_path, src):
    p = tmp_path / "photo.onnx"
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    return p


@pytest.mark.parametrize("make", [_corrupt, _truncated, _not_onnx])
def test_damaged_files_give_one_line_and_exit_3(tmp_path, ocr_cls, make):
    res = run("check", str(make(tmp_path, ocr_cls)))
    assert res.exit_code == ExitCode.INVALID_MODEL, res.output
    assert len(error_lines(res)) == 1 and "Traceback" not in res.output


@pytest.mark.parametrize("location, words", [("missing.bin", "not found"), ("../outside.bin", "escapes")])
def test_external_data_problems_give_one_line_and_exit_3(tmp_path, location, words):
    p = _external_model(tmp_path, location)
    if location == "missing.bin":
        (tmp_path / "w.bin").unlink()
    res = run("check", str(p))
    assert res.exit_code == ExitCode.INVALID_MODEL
    (line,) = error_lines(res)
    assert words in line and "Traceback" not in res.output


def test_structural_error_names_the_node(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["ghost"], ["y"], name="relu7")], "g",
                          [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, [1])])
    p = tmp_path / "broken.onnx"
    p.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    res = run("check", str(p))
    assert res.exit_code == ExitCode.INVALID_MODEL
    (line,) = error_lines(res)
    assert "relu7" in line and "ghost" in line


def test_traceback_flag_shows_the_traceback(tmp_path, ocr_cls):
    p = _truncated(tmp_path, ocr_cls)
    res = CliRunner().invoke(cli, ["--traceback", "check", str(p)])
    assert res.exit_code == ExitCode.INVALID_MODEL and "Traceback (most recent call last)" in res.stderr
    assert "Traceback" not in run("check", str(p)).stderr


def test_installed_entry_point_real_subprocess(tmp_path, ocr_cls):
    exe = shutil.which("trtconv")
    assert exe, "trtconv entry point not installed: run `make install`"
    bad = _truncated(tmp_path, ocr_cls)
    out = subprocess.run([exe, "check", str(bad)], capture_output=True, text=True)
    assert out.returncode == ExitCode.INVALID_MODEL and out.stdout == ""
    assert out.stderr.splitlines()[0].startswith("trtconv: error:") and "Traceback" not in out.stderr
    ok = subprocess.run([exe, "check", "--json", str(ocr_cls)], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["verdict"] == "supported"


def test_cli_json_is_the_python_api_report(silero):
    from trtconv.analyze import analyze
    from trtconv.load import load_model

    res = run("check", str(silero), "--json", "--trt", "10.16", "--shapes", "input:1x512")
    api = analyze(load_model(silero, load_weights=False), "10.16", {"input": (1, 512)}).to_json()
    assert json.loads(res.stdout) == json.loads(json.dumps(api))


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_rtx") is None, reason="tensorrt_rtx is not installed")
def test_live_shows_the_real_parser_and_builder_next_to_the_prediction(ocr_cls):
    res = run("check", str(ocr_cls), "--trt", "rtx", "--live", "--json", "--shapes", "x:1x3x48x192")
    doc = json.loads(res.stdout)
    live = doc["live"]
    assert live["tensorrt"].startswith("tensorrt_rtx") and live["parse"] == "accept" and live["build"] == "fail"
    assert live["predicted"] == {"parse": "accept", "build": "fail"} and live["agrees"] is True
    assert res.exit_code == ExitCode.NEEDS_REWRITE  # TensorRT refused the build; `trtconv rewrite` fixes it
    res = run("check", str(ocr_cls), "--trt", "rtx", "--live", "--shapes", "x:1x3x48x48")
    assert res.exit_code == ExitCode.OK and "AGREES" in res.stdout and "built" in res.stdout


def test_live_without_that_tensorrt_is_the_prediction_with_a_note(ocr_cls):
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT 10/11 is installed here")
    res = run("check", str(ocr_cls), "--trt", "11.4", "--live", "--json")
    doc = json.loads(res.stdout)
    assert doc["live"] is None and any("--live: tensorrt is not installed" in w for w in doc["warnings"])


def test_lstm_in_an_if_with_a_folded_condition_is_what_rtx_builds(tmp_path):
    """Issue 26 (check vs one build): silero_vad_half picks its decoder LSTM in an If on a shape-only
    condition. `rewrite --shapes` folds that condition to a constant; TensorRT-RTX's parser then imports
    only the branch taken and its builder builds the model (--live). check said unsupported (rnn-in-if
    looked at the path only); it must say what the real parser and builder do."""
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    from realmodels import silero_model

    folded = tmp_path / "half.onnx"
    shapes = "input:1x576,state:2x1x128"
    assert run("rewrite", str(silero_model("silero_vad_half.onnx")), "--shapes", shapes, "-o", str(folded)).exit_code == 0
    before = json.loads(run("check", str(silero_model("silero_vad_half.onnx")), "--trt", "rtx", "--json").stdout)
    assert before["verdict"] == "unsupported"  # a run-time condition: the builder fails (graphScope assertion)
    res = run("check", str(folded), "--trt", "rtx", "--live", "--json", "--shapes", shapes)
    doc = json.loads(res.stdout)
    assert doc["live"]["build"] == "ok", doc["live"]
    assert res.exit_code == ExitCode.OK and doc["verdict"] == "supported" and doc["live"]["agrees"] is True
    assert not [f for n in doc["nodes"] for f in n["findings"] if f["rule"] == "rnn-in-if"]


def test_shapes_against_a_fixed_dim_name_the_dim_and_a_shapes_that_works(tmp_path):
    """`check m.onnx --shapes images:2x4x64x64` on a [batch, 3, h, w] input said only "has fixed dims
    ['batch', 3, 'h', 'w']; --shapes gives [2, 4, 64, 64]", no hint; now the dim, and a --shapes that runs."""
    g = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g",
                          [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "h", "w"])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    res = CliRunner().invoke(cli, ["check", str(model), "--shapes", "images:2x4x64x64"])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "input 'images' dim 1 is fixed at 3 in the model; --shapes gives 4" in res.output
    fixed = res.output.split("hint: keep fixed dims as they are: ", 1)[1].split()
    assert fixed == ["--shapes", "images:2x3x64x64"]
    assert CliRunner().invoke(cli, ["check", str(model), *fixed]).exit_code == 0
    res = CliRunner().invoke(cli, ["check", str(model), "--shapes", "images:1x3x64"])
    assert res.exit_code == ExitCode.USAGE and "hint: its dims are [batch, 3, h, w]" in res.output, res.output


def test_live_build_failing_only_at_placeholder_shapes_is_not_counted(tmp_path):
    """A 1-D convolution over [1, 1, n] (an audio front end): --live without --shapes builds at n = 1, where a
    kernel of 3 has no output; TensorRT's refusal there says nothing of the model, so it is shown and not
    counted (the prediction's exit 0, not 5); with --shapes the real build decides."""
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    model = audio_conv_model(tmp_path / "audio.onnx", kernel=3)
    res = run("check", str(model), "--trt", "rtx", "--live", "--json")
    live = json.loads(res.stdout)["live"]
    assert live["build"] == "fail" and live["build_counted"] is False and live["placeholder_inputs"] == ["x"]
    assert res.exit_code == ExitCode.OK and live["agrees"] is True
    text = run("check", str(model), "--trt", "rtx", "--live")
    assert "failed at placeholder shapes (the dynamic dims of x taken as 1" in text.stdout, text.stdout
    assert text.exit_code == ExitCode.OK
    shaped = run("check", str(model), "--trt", "rtx", "--live", "--json", "--shapes", "x:1x1x16")
    assert json.loads(shaped.stdout)["live"]["build"] == "ok" and shaped.exit_code == ExitCode.OK


def test_live_summary_line_says_when_tensorrt_overrules_the_predictions_word(tmp_path):
    """The summary's word is the prediction's (SUPPORTED); when TensorRT-RTX's parser refuses (exit 5), the
    same line says so, never a bare SUPPORTED above an exit 5."""
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    from builders import int32_relu_model

    res = run("check", str(int32_relu_model(tmp_path / "relu.onnx")), "--trt", "rtx", "--live")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    summary = res.stdout.strip().splitlines()[-1]
    assert summary.startswith("TensorRT-RTX: SUPPORTED - ") and summary.endswith("; TensorRT itself refused it (exit 5)")
