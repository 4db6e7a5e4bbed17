from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# One OpenBLAS thread per test process (and the trtconv processes the tests start, which inherit it), set
# before numpy is first imported. trtconv's numpy work between ONNX Runtime runs (e.g. the per-layer float64
# dot products of INT8's sensitivity pass) otherwise wakes a second BLAS thread that contends with ONNX
# Runtime's spinning pool threads on the same cores: on the shared 2-core machine the per-tensor auto test
# took 56 CPU s with the default threads and 13 with one (docs/benchmarks.md, "`make test` time").
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).parent))

from realmodels import rapidocr_model, silero_model  # noqa: E402


@pytest.fixture(scope="session")
def ocr_det() -> Path:
    return rapidocr_model("det")


@pytest.fixture(scope="session")
def ocr_rec() -> Path:
    return rapidocr_model("rec")


@pytest.fixture(scope="session")
def ocr_cls() -> Path:
    return rapidocr_model("cls")


@pytest.fixture(scope="session")
def silero() -> Path:
    return silero_model()


@pytest.fixture(scope="session")
def rec_int8_rtx(tmp_path_factory) -> tuple[Path, int, str, Path, Path]:
    """PP-OCR's recognizer as an INT8 TensorRT-RTX engine (trtconv's Q/DQ, FP16 remainder), built on the CPU
    once per session for every test that reads one: (engine, exit code, output, calibration cache, the
    rendered text lines it calibrated on). A dynamic width/batch profile, its layer table (--layers) and
    its calibration cache kept. The layer precisions are what the readers test, not accuracy: 8 rendered
    lines are too few for the default accuracy gate (tests/cli/test_int8_gate_cli.py tests the gate on the
    recognizer)."""
    from builders import cls_calibration
    from click.testing import CliRunner

    from trtconv.cli.main import cli

    folder = tmp_path_factory.mktemp("rec-int8-rtx")
    lines = cls_calibration(folder / "lines", n=8)
    engine, cache = folder / "rec.engine", folder / "rec.cache"
    res = CliRunner().invoke(cli, [str(a) for a in (
        "build", "--trt", "rtx", rapidocr_model("rec"), "-o", engine, "--precision", "int8", "--int8-unverified", "--calib-data", lines,
        "--calib-cache", cache, "--min-shapes", "x:1x3x48x96", "--opt-shapes", "x:1x3x48x192",
        "--max-shapes", "x:2x3x48x320", "--min-cosine", "0", "--layers")])
    return engine, res.exit_code, res.output, cache, lines


@pytest.fixture
def copy_model(tmp_path: Path):
    """Copy a model file into tmp_path so a test may damage it."""

    def _copy(src: Path, name: str | None = None) -> Path:
        dst = tmp_path / (name or src.name)
        shutil.copyfile(src, dst)
        return dst

    return _copy


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _has_tensorrt() -> str | None:
    """None if TensorRT can build here, else the reason it cannot."""
    try:
        import tensorrt  # noqa: F401  (the test tree may probe for it)
    except Exception as exc:  # ImportError, or OSError from missing native libraries
        return f"TensorRT not importable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if not _has_gpu():
        return "no CUDA GPU visible"
    return None


def pytest_collection_modifyitems(config, items):
    trt_reason = None
    gpu = None
    for item in items:
        # markers, not keywords: a test's keywords also hold its folder names (tests/trt/)
        if item.get_closest_marker("trt"):
            trt_reason = trt_reason or _has_tensorrt() or ""
            if trt_reason:
                item.add_marker(pytest.mark.skip(reason=f"needs TensorRT + GPU: {trt_reason}"))
        elif item.get_closest_marker("gpu"):
            gpu = _has_gpu() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (none visible)"))
