"""Shared by the memory benchmarks: time and peak RSS of one command in a fresh process.

The peak is the process's own VmHWM, read by the process itself as it exits. wait4's
``ru_maxrss`` is not used: Linux carries it across fork+exec, so a child started by a
large parent reports the parent's size (a 2 GiB parent made ``python -c pass`` read 2075 MiB).
Python commands (``[sys.executable, "-m", MODULE, ...]`` or ``[sys.executable, "-c", CODE]``)
run under this file as a thin wrapper that writes VmHWM to a file at exit.

    python benchmarks/measure.py --hwm FILE -m trtconv check model.onnx
"""

from __future__ import annotations

import atexit
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def vmhwm_mib() -> float:
    """This process's peak resident set (VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_rss(cmd: list[str], env: dict[str, str] | None = None, as_limit: int | None = None,
             stderr_chars: int = 600) -> tuple[float, float, int, str]:
    """(peak RSS MiB, wall s, exit code, stderr tail) of one fresh subprocess; ``as_limit``:
    an address-space cap (RLIMIT_AS, bytes) so that a run that would take the machine fails instead;
    ``stderr_chars``: how much of stderr's end to keep."""
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] not in ("-m", "-c"):
        raise ValueError("peak_rss measures Python commands: [sys.executable, '-m'|'-c', ...]")
    with tempfile.TemporaryDirectory(prefix="measure-") as tmp:
        hwm = Path(tmp) / "hwm"
        wrapped = [sys.executable, __file__, "--hwm", str(hwm), *cmd[1:]]
        start = time.monotonic()
        def cap() -> None:
            if as_limit:
                resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))

        proc = subprocess.run(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                              preexec_fn=cap)
        wall = time.monotonic() - start
        rss = float(hwm.read_text()) if hwm.exists() else float("nan")
    return rss, wall, proc.returncode, proc.stderr[-stderr_chars:]


def _main(argv: list[str]) -> None:
    """Run ``-m MODULE ARGS`` or ``-c CODE ARGS`` in this process; write VmHWM to --hwm at exit."""
    if len(argv) < 4 or argv[0] != "--hwm" or argv[2] not in ("-m", "-c"):
        raise SystemExit("usage: measure.py --hwm FILE -m MODULE [ARGS] | -c CODE [ARGS]")
    out, kind, target, rest = argv[1], argv[2], argv[3], argv[4:]
    atexit.register(lambda: Path(out).write_text(f"{vmhwm_mib():.1f}"))
    sys.path[0] = os.getcwd()  # as `python -m` / `-c` would have it, not this folder
    if kind == "-m":
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    _main(sys.argv[1:])
