"""The process edges: closed or full stdout, SIGTERM, model paths that are not files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from interrupts import interrupt_before_rename
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import save_model
from trtconv.outputs import TMP_PREFIX

TRTCONV = [sys.executable, "-m", "trtconv"]


@pytest.mark.parametrize("as_json", [True, False])
def test_closed_stdout_pipe_is_quiet_io_error(ocr_det, as_json):
    """`trtconv check model | true`: the reader is gone before the report is written."""
    cmd = [*TRTCONV, "check", str(ocr_det), *(["--json"] if as_json else [])]
    r, w = os.pipe()
    os.close(r)  # no reader at all: the first write gets EPIPE
    try:
        res = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert res.returncode == ExitCode.IO_ERROR, res.stderr
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr


def test_full_stdout_is_one_line_io_error(ocr_cls):
    with open("/dev/full", "w") as full:
        res = subprocess.run([*TRTCONV, "check", str(ocr_cls), "--json"], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert res.returncode == ExitCode.IO_ERROR, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "trtconv: error: cannot write the report to stdout: No space left on device"


def test_sigterm_mid_write_exits_130_and_leaves_nothing(tmp_path):
    """CI cancels jobs with SIGTERM: it must clean up like Ctrl-C, not die mid-write. The signal
    lands with the temp file written and not yet renamed (a known point, not a timed guess)."""
    n = 8 * 2**20
    w = numpy_helper.from_array(np.full((n,), 2.0, np.float32), "W")
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [w])
    model = save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    res = interrupt_before_rename(["quantize", str(model), "--precision", "fp16", "-o", str(out_dir / "o.onnx")],
                                  out_dir, signal.SIGTERM)
    assert "signal before rename of " + TMP_PREFIX in res.stderr, res.stderr[-2000:]
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert list(out_dir.iterdir()) == []


def test_model_path_that_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)  # reading it would block forever
    zero = tmp_path / "zero.onnx"
    zero.symlink_to("/dev/zero")  # reading it would fill memory
    for path in (fifo, zero):
        start = time.monotonic()
        res = CliRunner().invoke(cli, ["check", str(path)])
        assert time.monotonic() - start < 5
        assert res.exit_code == ExitCode.USAGE and "not a regular file" in res.stderr


def test_directory_and_missing_model(tmp_path: Path):
    for path, code in ((tmp_path, ExitCode.USAGE), (tmp_path / "absent.onnx", ExitCode.USAGE)):
        res = CliRunner().invoke(cli, ["check", str(path)])
        assert res.exit_code == code, res.output
        assert "Traceback" not in res.stderr
