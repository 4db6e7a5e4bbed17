"""Ctrl-C and SIGTERM while the real TensorRT-RTX builder runs: exit 130, nothing written.

TensorRT calls back into Python (its logger, its progress monitor) from inside the build; an
interrupt raised in a callback used to be printed by the bindings and lost, and the engine, its
manifest and the prepared ONNX were written with exit 0 (issue 26, item 1). The signal is sent
from inside the real builder (tests/interrupts.py), so the outcome does not depend on timing.
"""

from __future__ import annotations

import signal

import onnx
import pytest
from interrupts import interrupt_after_rename, interrupt_inside_tensorrt_build
from onnx import TensorProto, helper
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
    assert "trtconv: build: interrupted (" in res.stderr and "build: failed" not in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["m.prepared.onnx", "m.engine", "m.engine.json"])
def test_ctrl_c_right_after_an_output_lands_removes_it(name, tmp_path):
    """A Ctrl-C that lands after a file was renamed into place, before the build recorded it (seen:
    `timeout -s INT 2.6 trtconv build ...` during the save stage left m.prepared.onnx behind while
    saying "no partial output was left behind"): exit 130 and the folder empty."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "out"
    out.mkdir()
    res = interrupt_after_rename(["build", "--trt", "rtx", str(model), "-o", str(out / "m.engine")],
                                 out, name, signal.SIGINT)
    assert f"signal after rename to {name}" in res.stderr, res.stderr[-2000:]
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
