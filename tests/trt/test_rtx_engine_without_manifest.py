"""verify and bench on a real TensorRT-RTX engine (issue 26, item 12): the flavour comes from the
manifest, else the engine's header, else --trt; a dynamic engine is verified at its profile's
opt shape (the manifest's), never with a request for --shapes holding a placeholder. Nothing
here runs an RTX engine (no RTX GPU), so each command ends with exit 9 and the RTX reason."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from realmodels import rapidocr_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.verify.engine_vs_reference import manifest_opt_shapes

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

RTX_REASON = "is a TensorRT-RTX engine"


@pytest.fixture(scope="module")
def dynamic_engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rtx")
    engine = folder / "cls.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(rapidocr_model("cls")), "-o", str(engine),
                                   "--min-shapes", "x:1x3x48x96", "--opt-shapes", "x:1x3x48x192",
                                   "--max-shapes", "x:1x3x48x320"])
    assert res.exit_code == 0, res.output
    return engine


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_verify_takes_a_dynamic_engines_shapes_from_its_manifest(dynamic_engine):
    assert manifest_opt_shapes(dynamic_engine) == {"x": (1, 3, 48, 192)}
    res = _run("verify", dynamic_engine, "--onnx", rapidocr_model("cls"), "--json")
    assert "--shapes" not in res.stderr  # no request for shapes: the manifest has the profile
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    assert f"cls.engine {RTX_REASON} (known from its manifest cls.engine.json)" in res.stderr
    assert json.loads(res.stdout)["error"]["exit_code"] == ExitCode.TENSORRT_UNAVAILABLE


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_without_its_manifest_an_rtx_engine_is_known_by_its_header(command, dynamic_engine, tmp_path):
    engine = tmp_path / "bare.engine"
    shutil.copy(dynamic_engine, engine)  # no bare.engine.json
    extra = ["--onnx", rapidocr_model("cls")] if command == "verify" else []
    res = _run(command, engine, *extra)
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    assert f"bare.engine {RTX_REASON} (known from its header)" in res.stderr
    assert "runs only on an RTX-class GPU" in res.stderr
    assert "pip install tensorrt" not in res.stderr and "--shapes" not in res.stderr


def test_trt_flag_names_the_runtime_when_nothing_else_does(dynamic_engine, tmp_path):
    engine = tmp_path / "bare.engine"
    shutil.copy(dynamic_engine, engine)
    res = _run("bench", engine, "--trt", "rtx")
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    assert f"bare.engine {RTX_REASON} (known from --trt)" in res.stderr


@pytest.mark.parametrize("command, bare", [("verify", False), ("bench", True)])
def test_a_trt_flag_the_engine_contradicts_is_a_usage_error(command, bare, dynamic_engine, tmp_path):
    """`verify r.engine --trt 10.16` on an RTX engine said "r.engine is a TensorRT engine (known from --trt),
    and TensorRT is not available" (exit 9) with a hint to install TensorRT or "build ... add --trt rtx":
    the engine's manifest or header says which runtime it needs, so a --trt against it is exit 2."""
    engine = dynamic_engine
    if bare:
        engine = tmp_path / "bare.engine"
        shutil.copy(dynamic_engine, engine)
    extra = ["--onnx", rapidocr_model("cls")] if command == "verify" else []
    res = _run(command, engine, *extra, "--trt", "10.16")
    assert res.exit_code == ExitCode.USAGE, res.output
    said = "its header" if bare else "its manifest cls.engine.json"
    assert f"{engine} is a TensorRT-RTX engine (known from {said}), but --trt 10.16 names TensorRT" in res.stderr
    assert "pip install tensorrt" not in res.stderr
