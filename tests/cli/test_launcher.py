"""The `trtconv` command runs the CLI in a child process and stands by it (trtconv/launcher.py): a crash
inside the work — TensorRT-RTX's builder ends in a segmentation fault on some graphs — ends in one line,
a documented exit code, and nothing the run wrote left behind; every other exit passes through as is.

The crash here is a real SIGSEGV delivered to the real child in the middle of a real build, after its
prepared ONNX was written (what the shell's "Segmentation fault" used to leave behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from realmodels import rapidocr_model

from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

LAUNCH = [sys.executable, "-c", "import sys; sys.argv[0] = 'trtconv'; from trtconv.launcher import main; main()"]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _build_until_prepared(folder: Path) -> tuple[subprocess.Popen, Path, Path]:
    """A real RTX build of PP-OCR's detector through the launcher, returned once its prepared ONNX is on disk
    (the builder then runs for seconds: a dynamic profile up to 4x3x1280x1280)."""
    engine, prepared = folder / "det.engine", folder / "det.prepared.onnx"
    proc = subprocess.Popen([*LAUNCH, "build", str(rapidocr_model("det")), "-o", str(engine),
                             "--min-shapes", "x:1x3x32x32", "--opt-shapes", "x:1x3x640x640",
                             "--max-shapes", "x:4x3x1280x1280"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not prepared.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return proc, engine, prepared


def test_a_crash_mid_build_says_so_in_one_line_and_leaves_nothing(tmp_path):
    proc, engine, prepared = _build_until_prepared(tmp_path)
    (child,) = _children(proc.pid)
    os.kill(child, signal.SIGSEGV)  # the builder runs for seconds after the prepared ONNX is saved
    out, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("trtconv: error:")]
    assert len(lines) == 1 and "crashed (SIGSEGV) in the " in lines[0], err
    stage = lines[0].split("in the ", 1)[1].split(" stage")[0]
    assert stage in ("save", "recheck", "profiles", "build"), lines[0]  # the prepared ONNX is on disk by then
    assert proc.returncode == (ExitCode.BUILD_FAILED if stage == "build" else ExitCode.INTERNAL)
    assert f"removed what it had written ({prepared}" in lines[0]
    hint = err.split("  hint: ", 1)[1].splitlines()[0]
    assert hint.startswith("trtconv -v build ") and str(engine) in hint  # the command again, with -v
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no engine, no prepared ONNX, no temps
    assert "Segmentation fault" not in err


def test_every_other_exit_passes_through_unchanged(tmp_path):
    missing = tmp_path / "nothing.onnx"
    direct = subprocess.run([sys.executable, "-m", "trtconv", "check", str(missing)], capture_output=True, text=True)
    launched = subprocess.run([*LAUNCH, "check", str(missing)], capture_output=True, text=True)
    assert launched.returncode == direct.returncode != 0
    assert launched.stderr == direct.stderr and launched.stdout == direct.stdout
    ok = subprocess.run([*LAUNCH, "--version"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("trtconv")


def test_sigterm_to_the_command_reaches_the_work_and_ends_it_as_ctrl_c_does(tmp_path):
    proc, _, _ = _build_until_prepared(tmp_path)
    proc.send_signal(signal.SIGTERM)  # to the command alone, as `docker stop` sends it
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
