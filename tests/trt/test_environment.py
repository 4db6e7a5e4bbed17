"""`trtconv doctor` for real on this machine, and against NVIDIA's real bindings without their libraries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.trt.environment import Environment, Gpu, TensorRTStatus, probe, problems

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "trt-stubs" / "wheels"


def test_doctor_json_describes_this_machine():
    env = probe()
    res = CliRunner().invoke(cli, ["doctor", "--json"])
    data = json.loads(res.stdout)
    assert set(data["environment"]) >= {"tensorrt", "cuda_driver", "driver", "cuda_runtime", "gpus", "packages"}
    assert data["environment"]["packages"]["onnxruntime"]
    assert data["can_build"] == (env.tensorrt.importable and bool(env.gpus) and not env.driver_error)
    assert data["can_build_rtx"] == env.tensorrt_rtx.importable
    assert res.exit_code == (0 if data["can_build"] or data["can_build_rtx"] else ExitCode.TENSORRT_UNAVAILABLE)
    if not data["can_build"]:
        assert data["problems"], "a machine that cannot build must be told why"
        assert all(p["fix"] for p in data["problems"])


def test_doctor_human_output_names_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    res = CliRunner().invoke(cli, ["doctor"])
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE
    assert "TensorRT" in res.stdout and "missing" in res.stdout
    assert "pip install tensorrt" in res.stdout
    assert "build --prepare-only work here" in res.stdout


def test_problems_cover_old_gpus_and_missing_runtime():
    env = Environment(TensorRTStatus(True, "10.16.1.11"), "12.4", "550.54", None,
                      (Gpu(0, "Tesla V100", "7.0", 16 << 30),), None, {"polygraphy": "0.53.6"})
    found = [p for p, _ in problems(env)]
    assert any("older than Turing" in p for p in found)
    assert any("libcudart" in p for p in found)


def test_real_bindings_without_native_libraries_are_diagnosed(tmp_path: Path):
    """The 11.4 bindings wheel (fetched by `make stubs`) imports only with libnvinfer: doctor says so."""
    wheel = next(iter(sorted(WHEELS.glob("tensorrt_cu13_bindings-11.4.0.106-*.whl"))), None)
    if wheel is None:
        pytest.skip("bindings wheel not downloaded: run `make stubs`")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "wheel")
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "tensorrt").symlink_to(tmp_path / "wheel" / "tensorrt_bindings")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "py"), str(ROOT)]))
    env.pop("LD_LIBRARY_PATH", None)
    out = subprocess.run([sys.executable, "-m", "trtconv", "doctor", "--json"], capture_output=True, text=True,
                         env=env, timeout=120)
    data = json.loads(out.stdout)
    # TensorRT-RTX (the test extra) builds without TensorRT: then doctor is satisfied, else exit 9
    assert out.returncode == (0 if data["can_build_rtx"] else ExitCode.TENSORRT_UNAVAILABLE), out.stderr
    assert data["can_build"] is False
    trt = data["environment"]["tensorrt"]
    assert not trt["importable"]
    assert "cannot open shared object file" in trt["error"] and "libnv" in trt["error"], trt["error"]
    fixes = [p["fix"] for p in json.loads(out.stdout)["problems"] if p["problem"].startswith("TensorRT")]
    assert "bindings are installed but TensorRT's libraries" in fixes[0]


def test_driver_too_old_for_the_tensorrt_wheels():
    env = Environment(TensorRTStatus(True, "11.4.0.106", None, {"tensorrt-cu13-libs": "11.4.0.106"}),
                      "12.8", "570.86", "12.8", (Gpu(0, "NVIDIA L4", "8.9", 24 << 30),), None,
                      {"polygraphy": "0.53.6"})
    (problem, fix), = problems(env)
    assert "installed for CUDA 13" in problem and "supports CUDA 12.8 only" in problem
    assert "r580" in fix and "tensorrt-cu12" in fix
    env12 = Environment(TensorRTStatus(True, "10.16.1.11", None, {"tensorrt-cu12-libs": "10.16.1.11"}),
                        "12.8", "570.86", "12.8", (Gpu(0, "NVIDIA L4", "8.9", 24 << 30),), None,
                        {"polygraphy": "0.53.6"})
    assert problems(env12) == []


def test_doctor_and_version_report_tensorrt_rtx():
    """The test extra installs TensorRT-RTX: doctor and --version name it with its real version."""
    rtx = pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    res = CliRunner().invoke(cli, ["doctor", "--json"])
    data = json.loads(res.stdout)
    status = data["environment"]["tensorrt_rtx"]
    assert status["importable"] and status["version"] == rtx.__version__
    assert status["distributions"]["tensorrt-rtx"] == rtx.__version__
    assert data["can_build_rtx"] is True and res.exit_code == 0
    human = CliRunner().invoke(cli, ["doctor"]).stdout
    assert "TensorRT-RTX" in human and "build --trt rtx" in human
    version = CliRunner().invoke(cli, ["--version"]).stdout
    assert f"tensorrt-rtx {rtx.__version__}" in version.splitlines()
