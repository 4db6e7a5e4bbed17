"""Where output goes: results (and --json) on stdout; progress, warnings and logs on stderr.

Progress bars appear only on an interactive stderr, so CI logs stay clean; rich
honours NO_COLOR by itself.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtconv.cli.main import JSON_PRINTED_KEY
from trtconv.errors import ExitCode, OutputError
from trtconv.outputs import dumps_json
from trtconv.settings import INT8_ONLY, INT8_SPLIT, given_flags


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own handler exits with status 1, which trtconv reserves for its bugs;
        # hand the closed pipe to trtconv.cli.main, which ends with IO_ERROR instead.
        raise BrokenPipeError


# In a pipe or a CI log nothing may wrap, fold or truncate (a folded "2.31e-05" reads as 2.31):
# tables get all the width they need, one row per line.
PIPE_WIDTH = 1 << 15


def interactive(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _TrimmedLines:
    """A stream whose lines lose their trailing spaces: rich pads every table cell to its column's width, the
    last one too, which in a pipe or a CI log is only noise (``diff``, ``grep 'x$'``)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.spaces = stream, ""

    def write(self, text: str) -> int:
        text = self.spaces + text
        body = text.rstrip(" ")
        self.spaces = text[len(body):]  # held until a character other than a newline follows them
        self.stream.write(re.sub(r" +\n", "\n", body))
        return len(text) - len(self.spaces)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def stdout_console() -> Console:
    if interactive(sys.stdout):
        return _Console(file=sys.stdout, highlight=False, soft_wrap=True)
    return _Console(file=_TrimmedLines(sys.stdout), highlight=False, soft_wrap=True, width=PIPE_WIDTH)


def cell_lines(lines: list[str]) -> str:
    """Several lines in one table cell: stacked on a terminal, one line ("; ") in a pipe."""
    return ("\n" if interactive(sys.stdout) else "; ").join(lines)


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def print_json(obj: Any) -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[JSON_PRINTED_KEY] = True
    text = dumps_json(obj)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader left: trtconv.cli.main ends quietly
    except OSError as exc:  # stdout is a full disk or a closed file

        raise OutputError(f"cannot write the report to stdout: {exc.strerror or exc}") from exc


def warn(message: str) -> None:
    """``trtconv: warning: ...`` on stderr (silent under -q): the same voice as the log."""
    logging.getLogger("trtconv").warning(message)


def warn_int8_only(values: Mapping[str, Any]) -> None:
    """Say which INT8-only flags an fp16 run was given (it reads none of them; a spec file shared with int8 runs
    may set them, so a warning, not a refusal)."""
    flags = given_flags(values, INT8_ONLY + INT8_SPLIT)
    if flags:
        warn(f"{', '.join(flags)} {'has' if len(flags) == 1 else 'have'} no effect with --precision fp16 "
             "(int8 only)")


def progress(transient: bool = True) -> Progress | LineProgress:
    """Progress on stderr: a bar on a terminal; in a pipe or CI log, plain lines (:class:`LineProgress`)."""
    if not interactive(sys.stderr):
        return LineProgress()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=transient,
    )


@dataclass
class LineTask:
    description: str
    total: float | None
    completed: float = 0
    started: float = 0.0
    said: float = 0.0  # when its last line was printed


class LineProgress:
    """rich's Progress API for a pipe: a ``trtconv: <phase>`` line when a phase starts (not again when
    it starts again right after itself), and one with the count every ``interval`` seconds while it
    runs, so a CI log never goes silent for long. Nothing under -q."""

    def __init__(self, *, interval: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.tasks: dict[int, LineTask] = {}
        self._next = 0
        self._last = ""  # the last line said: a phase started again right after itself is not said twice

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.tasks.clear()

    def add_task(self, description: str, total: float | None = None, **_fields: Any) -> int:
        now = self.clock()
        task_id, self._next = self._next, self._next + 1
        self.tasks[task_id] = LineTask(description.strip(), total, 0, now, now)
        line = f"trtconv: {description.strip()}"
        if line != self._last:  # TensorRT starts one phase per subgraph: "Computing reformatting costs" x 9
            _say(line)
            self._last = line
        return task_id

    def update(self, task_id: int, *, completed: float | None = None, advance: float | None = None,
               total: float | None = None, **_fields: Any) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            return
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        now = self.clock()
        if now - task.said >= self.interval:
            task.said = now
            count = f"{task.completed:g}" + (f"/{task.total:g}" if task.total else "")
            self._last = f"trtconv: {task.description}: {count} ({now - task.started:.0f} s)"
            _say(self._last)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: int) -> None:
        self.tasks.pop(task_id, None)


class Heartbeat:
    """In a pipe, ``trtconv: <label>: running (10 s)`` every ``interval`` seconds while a stage runs,
    from a daemon thread, so a CI log never goes silent for long even where the stage itself
    reports no progress (a rewrite's proofs, ONNX Runtime on one large input). Nothing on a
    terminal (bars show the elapsed time there) or under -q. ``lock``: held while printing, so a
    line never lands inside another writer's. A stage that says its own progress (``3/44 (5 s)``)
    is not silent: the beat waits until nothing was said for ``interval`` seconds, so such a log
    does not get two lines every five seconds."""

    def __init__(self, label: str, *, interval: float = 5.0, lock: Any = None) -> None:
        self.label = label
        self.interval = interval
        self.lock = lock
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.started = time.monotonic()
        if interactive(sys.stderr) or not logging.getLogger("trtconv").isEnabledFor(logging.WARNING):
            return
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"trtconv-{self.label}-heartbeat")
        self._thread.start()

    def stop(self) -> float:
        """Stop ticking; the seconds since start."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return time.monotonic() - self.started

    def _quiet_for(self) -> float:
        return time.monotonic() - max(_said.at, self.started)

    def _run(self) -> None:
        while not self._stop.wait(max(self.interval - self._quiet_for(), 0.05)):
            with self.lock if self.lock is not None else contextlib.nullcontext():
                if not self._stop.is_set() and self._quiet_for() >= self.interval:
                    _say(f"trtconv: {self.label}: running ({time.monotonic() - self.started:.0f} s)")


@dataclass
class _Said:
    """When a progress line was last printed (the heartbeat keeps quiet until it is old)."""

    at: float = float("-inf")


_said = _Said()


def _say(line: str) -> None:
    if logging.getLogger("trtconv").isEnabledFor(logging.WARNING):  # not -q
        click.echo(line, err=True)
        _said.at = time.monotonic()


def finish(code: ExitCode | int) -> NoReturn:
    """End a command with a documented exit code (click ignores return values)."""
    raise click.exceptions.Exit(int(code))
