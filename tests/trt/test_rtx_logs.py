"""TensorRT's own log lines in a real TensorRT-RTX build (issue 26, item 10): marked as TensorRT's,
each repeated warning shown once with a count (all of them with -v), each builder error once."""

from __future__ import annotations

import re

import pytest
from builders import cls_calibration
from click.testing import CliRunner
from onnx import TensorProto, helper, save
from realmodels import rapidocr_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

REPEATED = "(foreignNode) Converting conv activation scales to fp32."  # RTX says it once per INT8 conv


def _int8_build(tmp_path, *verbose: str) -> str:
    """A real INT8 build's stderr; a second call in the same folder reuses the first one's calibration
    (its cache): the log of TensorRT's build is under test, not the calibration."""
    calib = tmp_path / "calib"
    if not calib.exists():
        cls_calibration(calib)
    engine = tmp_path / f"cls{len(verbose)}.engine"
    res = CliRunner().invoke(cli, [*verbose, "build", "--trt", "rtx", str(rapidocr_model("cls")), "-o", str(engine),
                                   "--shapes", "x:1x3x48x192", "--precision", "int8", "--calib-data", str(calib),
                                   "--calib-cache", str(tmp_path / "cls.cache"), "--min-cosine", "0"])
    assert res.exit_code == 0, res.output
    return res.stderr


def test_repeated_tensorrt_warnings_are_marked_and_counted(tmp_path):
    err = _int8_build(tmp_path).splitlines()
    assert err.count(f"trtconv: tensorrt warning: {REPEATED}") == 1, err
    summary = [line for line in err if line.startswith("trtconv: tensorrt warning: (and ") and REPEATED in line]
    assert len(summary) == 1 and summary[0].endswith("; -v shows all)"), err
    assert int(summary[0].split("(and ")[1].split()[0]) >= 20  # one per quantized conv of the classifier
    assert not [line for line in err if "foreignNode" in line and "tensorrt warning" not in line]
    # the whole log of the build, not a flood (stage heartbeats, one per 5 s, grow with the machine's load)
    assert len([line for line in err if not re.search(r": running \(\d+ s\)$", line)]) < 40, err
    # TensorRT's build phases are said as TensorRT's, never as trtconv's own stages
    assert any(line.startswith("trtconv: tensorrt: Building engine") for line in err), err
    assert not [line for line in err if line.strip() in ("trtconv: Building engine", "trtconv: Timing tactics")]

    every = _int8_build(tmp_path, "-v").splitlines()  # -v: the full text, every line
    assert every.count(f"trtconv: tensorrt warning: {REPEATED}") >= 21
    assert not any("more like" in line for line in every)


def test_a_builder_error_is_printed_once(tmp_path):
    g = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, "n"]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None])])
    model = tmp_path / "two.onnx"
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), model)
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(tmp_path / "two.engine"),
                                   "--shapes", "a:1x4,b:1x8"])
    assert res.exit_code == ExitCode.BUILD_FAILED, res.output
    said = "Input dimensions with this name have different constant values"
    assert res.stderr.count(said) == 1, res.stderr
    assert "trtconv: error: TensorRT-RTX's builder failed: " in res.stderr


def test_every_phase_the_monitor_passes_on_is_named_by_one_helper():
    """trt/builder's progress monitor names TensorRT's phases, their parents and steps alike (one helper)."""
    from trtconv.trt.builder import _progress_monitor, tensorrt_phase
    from trtconv.trt.cancel import Cancel
    from trtconv.trt.flavour import RTX, active

    seen: list[tuple] = []

    class Sink:
        def phase_start(self, name, parent, steps):
            seen.append(("start", name, parent, steps))

        def step(self, name, step):
            seen.append(("step", name, step))

        def phase_finish(self, name):
            seen.append(("finish", name))

    with active(RTX):
        monitor = _progress_monitor(Sink(), Cancel())
        monitor.phase_start("Building engine", None, 3)
        monitor.phase_start("Timing tactics", "Building engine", 2)
        assert monitor.step_complete("Timing tactics", 1) is True
        monitor.phase_finish("Timing tactics")
    assert tensorrt_phase("Timing tactics") == "tensorrt: Timing tactics"
    assert seen == [("start", "tensorrt: Building engine", None, 3),
                    ("start", "tensorrt: Timing tactics", "tensorrt: Building engine", 2),
                    ("step", "tensorrt: Timing tactics", 1), ("finish", "tensorrt: Timing tactics")]
