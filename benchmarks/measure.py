"""Shared by the memory benchmarks: time and peak RSS of one command in a fresh process."""

from __future__ import annotations

import os
import subprocess
import time


def peak_rss(cmd: list[str]) -> tuple[float, float, int, str]:
    """(peak RSS MiB, wall s, exit code, stderr tail) of one fresh subprocess.

    wait4's rusage is the child's alone, so runs do not see each other's peaks.
    """
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.monotonic() - start, proc.returncode, err[-600:]
