"""A failed `trtconv build` leaves nothing it wrote, and `--json` names only files on disk (issue 26, item 9).

Real TensorRT-RTX builds of real models, failing at each stage after the prepared ONNX was
saved: the profile corners (exit 2), the builder (exit 6), the precision check (exit 8).
`--keep-prepared` keeps the prepared ONNX for debugging.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from builders import two_inputs_one_dim_name
from click.testing import CliRunner
from onnx import TensorProto, helper
from realmodels import rapidocr_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


def _reshape_to_2x3(folder: Path) -> Path:
    """x[1, w] reshaped to 2x3: only w = 6 runs; a profile reaching w = 5 fails the builder's own shape check (exit 2)."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 3])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape])
    path = folder / "reshape.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


FAILURES = {  # id: (model, flags, exit code, stage that failed)
    "builder-exit-6": (two_inputs_one_dim_name, ["--shapes", "a:1x4,b:1x8"], ExitCode.BUILD_FAILED, "build"),
    "precision-exit-8": (lambda _d: rapidocr_model("cls"),
                         ["--shapes", "x:1x3x48x192", "--precision", "fp16", "--exclude-op", "Conv"],
                         ExitCode.PRECISION_NOT_ACHIEVED, "build"),
    "profile-corner-exit-2": (_reshape_to_2x3, ["--min-shapes", "x:1x5", "--opt-shapes", "x:1x6",
                                                "--max-shapes", "x:1x6"], ExitCode.USAGE, "build"),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_failed_build_leaves_nothing_and_json_names_nothing(case, tmp_path):
    make, flags, code, stage = FAILURES[case]
    model = make(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(out / "m.engine"), *flags,
                                   "--json"])
    assert res.exit_code == code, res.output
    report = json.loads(res.stdout)
    stages = {s["name"]: s["status"] for s in report["stages"]}
    assert stages["save"] == "done" and stages[stage] == "failed"  # the prepared ONNX had been written
    assert list(out.iterdir()) == []  # ... and is gone, with no engine, manifest or temp
    assert report["prepared_onnx"] is None and report["engine"] is None and report["manifest"] is None
    assert report["error"]["exit_code"] == code and report["stopped"] == "error"


def test_keep_prepared_keeps_the_prepared_onnx_of_a_failed_build(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(two_inputs_one_dim_name(tmp_path)),
                                   "-o", str(out / "m.engine"), "--shapes", "a:1x4,b:1x8", "--keep-prepared",
                                   "--json"])
    assert res.exit_code == ExitCode.BUILD_FAILED, res.output
    assert sorted(p.name for p in out.iterdir()) == ["m.prepared.onnx"]
    assert json.loads(res.stdout)["prepared_onnx"] == str(out / "m.prepared.onnx")
    onnx.checker.check_model(str(out / "m.prepared.onnx"))  # whole, loadable: what TensorRT was given


def _int8_fails_after_calibrating(tmp_path: Path, cache: Path, out: Path) -> None:
    """An INT8 build that calibrates (writing --calib-cache), then fails its accuracy gate (exit 7: a limit no
    INT8 model meets, no auto-exclusion); minmax: the files a calibration leaves are under test, not the choice
    of method. (Excluding every Conv no longer gets that far: too small a share is refused before calibrating.)"""
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(rapidocr_model("cls")), "-o", str(out / "m.engine"),
                                   "--shapes", "x:1x3x48x192", "--precision", "int8", "--int8-unverified", "--random-data", "4",
                                   "--calib-method", "minmax", "--calib-cache", str(cache), "--min-cosine", "0.999999",
                                   "--no-auto-exclude", "--json"])
    assert res.exit_code == ExitCode.ACCURACY, res.output
    assert "INT8 accuracy below the thresholds" in res.stderr  # a calibrated candidate was judged


def test_a_failed_build_removes_the_calibration_cache_it_created_not_a_users(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    cache = tmp_path / "calib.cache"
    _int8_fails_after_calibrating(tmp_path, cache, out)
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no cache, no key
    # a cache that was there before (here: another model's) is the user's: never removed
    cache.write_text("TRT-8601-EntropyCalibration2\nx: 3c010a14\n")
    sidecar = tmp_path / "calib.cache.key.json"
    sidecar.write_text('{"key": "another model"}')
    _int8_fails_after_calibrating(tmp_path, cache, out)
    assert cache.exists() and sidecar.exists()
