"""A command that runs out of memory says so in one line, exits 12 and leaves nothing behind.

The memory is limited with RLIMIT_AS (address space), not by timing: the cap is what the
same command reserved on the unwidened model (same imports, threads and code path), plus
half the wide model's weights, which the wide model needs in full to be read at all. So the
first allocation that cannot be made is always one of the work's own, never start-up's.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from bigmodels import det_samples, model_bytes, widen_det

from trtconv.errors import ExitCode

HW = (64, 64)

_REPORT = (
    "import atexit, runpy, sys\n"
    "def _report():\n"
    "    s = {l.split(':')[0]: int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('Vm')}\n"
    "    print('VM', s['VmPeak'], file=sys.stderr)\n"
    "atexit.register(_report)\n"
    "sys.argv = ['trtconv', *sys.argv[1:]]\n"
    "runpy.run_module('trtconv', run_name='__main__')\n"
)


def _run(args: list[str], cwd: Path, limit: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    # a fixed number of malloc arenas and threads: the reserved address space must not depend on load
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MALLOC_ARENA_MAX": "2", "TMPDIR": str(cwd)}
    return subprocess.run([sys.executable, "-c", _REPORT, *args], capture_output=True, text=True, cwd=cwd,
                          preexec_fn=cap, env=env, timeout=600)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("oom")
    (folder / "narrow").mkdir()
    narrow = widen_det(1, folder / "narrow", HW)
    wide = widen_det(6, folder, HW)  # ~150 MiB of real PP-OCRv4 det weights, tiled
    return narrow, wide, det_samples(folder, HW, 2)


@pytest.mark.slow  # the command twice, about ten seconds
def test_running_out_of_memory_is_one_line_exit_12_and_nothing_written(models, tmp_path):
    narrow, wide, calib = models
    args = ["--precision", "fp16", "--calib-data", str(calib), "-o"]
    (tmp_path / "a").mkdir()
    small = _run(["quantize", narrow.name, *args, str(tmp_path / "a" / "n.onnx")], narrow.parent)
    assert small.returncode == 0, small.stderr[-1500:]
    reserved = int(next(ln for ln in small.stderr.splitlines() if ln.startswith("VM ")).split()[1]) * 1024
    size = model_bytes(wide)
    out = tmp_path / "b"
    out.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = _run(["quantize", str(wide), *args, str(out / "w.onnx")], scratch, reserved + size // 2)
    assert proc.returncode == ExitCode.OUT_OF_MEMORY, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("trtconv: error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith("trtconv: error: out of memory while ")
    assert f"holds {size / 2**30:.2f} GiB of weights" in errors[0]
    assert "nothing was written" in errors[0]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert list(out.iterdir()) == []  # no output, no temp file
    assert list(scratch.iterdir()) == []  # no scratch file of ONNX Runtime's sessions or spilled weights
