"""Drive the worker subprocess (tools/oracle/worker.py): one job at a time, a time limit each.

A builder that aborts the process or hangs costs only its own case: the worker is
restarted and the case is recorded as ``crash`` or ``timeout`` at the phase it reached.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tools.oracle.cases import Case
from trtconv.trt.realparse import aborted_verdict

WORKER = Path(__file__).with_name("worker.py")


class Worker:
    def __init__(self, module: str | None, build: bool) -> None:
        self.env = {**os.environ, "ORACLE_BUILD": "1" if build else "0", "ORACLE_TRT_MODULE": module or ""}
        self.proc: subprocess.Popen[str] | None = None
        self.version = ""
        self.pending = b""  # bytes read from the worker past the last full line

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=self.env, bufsize=1)
        assert proc.stdout is not None
        self.pending = b""
        hello = json.loads(self._line(proc, 120.0) or '{"error": "worker died at start"}')
        if "error" in hello:
            raise RuntimeError(hello["error"])
        self.version = f"{hello['ready']} {hello['version']}"
        return proc

    def _line(self, proc: subprocess.Popen[str], timeout: float) -> str:
        """The next line from the worker ('' at EOF); raw reads, because select() cannot see
        lines already sitting in a Python buffer."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return ""
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, case: Case, timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        job = {"id": case.id, "path": str(case.path), "shapes": {k: list(v) for k, v in case.shapes.items()},
               "values": {k: list(v) for k, v in case.values.items()}}
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        parsed: dict[str, Any] | None = None
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._line(proc, deadline - time.monotonic())
            except TimeoutError:
                self.stop()
                return _failed(parsed, "timeout", timeout)
            if not line:
                rc = proc.wait()
                self.proc = None
                return _failed(parsed, "crash", rc)
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if msg.get("phase") == "parsed":
                parsed = msg["real"]
            elif msg.get("phase") == "done":
                return dict(msg["real"])


def _failed(parsed: dict[str, Any] | None, how: str, detail: object) -> dict[str, Any]:
    return aborted_verdict(parsed, how, detail)


def run_real(cases: Iterable[Case], module: str | None = "tensorrt_rtx", build: bool = True,
             timeout: float = 60.0) -> Iterator[tuple[Case, dict[str, Any]]]:
    worker = Worker(module, build)
    try:
        for case in cases:
            yield case, worker.run(case, timeout)
    finally:
        worker.stop()
