"""Ctrl-C and SIGTERM while the real TensorRT-RTX builder runs: exit 130, nothing written.

TensorRT calls back into Python (its logger, its progress monitor) from inside the build; an
interrupt raised in a callback used to be printed by the bindings and lost, and the engine, its
manifest and the prepared ONNX were written with exit 0 (issue 26, item 1). The signal is sent
from inside the real builder (tests/interrupts.py), so the outcome does not depend on timing.
"""

from __future__ import annotations

import signal

import pytest
from interrupts import interrupt_inside_tensorrt_build
from realmodels import rapidocr_model

from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


@pytest.mark.parametrize("sig, callback", [
    pytest.param(signal.SIGINT, "log", id="ctrl-c-in-logger"),
    pytest.param(signal.SIGTERM, "log", id="sigterm-in-logger"),
    pytest.param(signal.SIGINT, "step_complete", id="ctrl-c-in-progress-monitor"),
    pytest.param(signal.SIGTERM, "step_complete", id="sigterm-in-progress-monitor"),
])
def test_signal_during_the_tensorrt_build_exits_130_and_writes_nothing(sig, callback, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = interrupt_inside_tensorrt_build(
        ["build", "--trt", "rtx", str(rapidocr_model("cls")), "-o", str(out / "cls.engine"),
         "--shapes", "x:1x3x48x192"], sig, callback)
    assert f"signal inside TensorRT's {callback} callback" in res.stderr, res.stderr  # it landed in the build
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr
    assert sorted(p.name for p in out.iterdir()) == [], res.stderr  # no engine, manifest, prepared ONNX, temp
    assert "interrupted; no partial output was left behind" in res.stderr
    assert "Exception caught" not in res.stderr and "Traceback" not in res.stderr
    assert "build: done" not in res.stderr
