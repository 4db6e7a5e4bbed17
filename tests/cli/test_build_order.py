"""`build` checks the cheap things first and never changes the engine's input contract silently
(issue 26, items 7 and 8): node support before "no shapes were given"; the sample files' names
before any stage runs; every profile trtconv derives is announced, with where it came from, and a
non-batch dim narrowed by the data is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _unsupported_dynamic(path: Path) -> Path:
    """A dynamic input into an op no TensorRT parser, rewrite or plugin knows."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mystery", ["r"], ["y"], name="mystery", domain="com.example")]
    g = helper.make_graph(nodes, "u", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                                ir_version=8), path)
    return path


def test_unsupported_model_fails_in_one_step_with_the_reason(tmp_path):
    res = run("build", _unsupported_dynamic(tmp_path / "u.onnx"), "-o", tmp_path / "u.engine", "--trt", "rtx")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "mystery" in res.stderr and "no shapes were given" not in res.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "u.onnx"]


def test_wrong_names_npz_is_reported_before_any_stage(ocr_cls, tmp_path):
    data = tmp_path / "data.npz"
    np.savez(data, images=np.zeros((1, 3, 48, 192), np.float32))  # the model's input is "x"
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--precision", "fp16", "--calib-data", data,
              "--shapes", "x:1x3x48x192", "--json")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    assert "images" in res.stderr
    assert json.loads(res.stdout)["stages"] == []  # not even the check: nothing heavy ran


def test_profile_from_calibration_data_is_announced_and_narrowing_warned(ocr_cls, tmp_path):
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i, width in enumerate((96, 192, 192, 320)):
        np.save(calib / f"{i}.npy", rng.uniform(-1, 1, (1, 3, 48, width)).astype(np.float32))
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--calib-data", calib, "--prepare-only")
    assert res.exit_code == ExitCode.OK, res.output
    warnings = [line for line in res.stderr.splitlines() if "warning:" in line]
    assert ("trtconv: warning: profile 0 taken from the 4 sample(s) of --calib-data (no shapes were given): "
            "x 1x3x48x96..1x3x48x320 (opt 1x3x48x192)") in "\n".join(warnings)
    narrowed = [w for w in warnings if "dim 3" in w]
    assert len(narrowed) == 1 and "spans only 96..320" in narrowed[0]
    assert not any("dim 0" in w for w in warnings)  # the batch is announced in the profile line only


def test_contradicting_options_are_reported_before_the_model_is_read(tmp_path):
    """--timing-cache with --trt rtx needs no model to refuse: a file that is not even ONNX
    gets the usage error (exit 2), not exit 3 after reading it."""
    model = tmp_path / "big.onnx"
    model.write_bytes(b"not an onnx model")
    res = run("build", model, "-o", tmp_path / "m.engine", "--trt", "rtx", "--timing-cache", tmp_path / "t.cache")
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "timing cache" in res.stderr
