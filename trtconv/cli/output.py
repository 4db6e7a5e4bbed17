"""Where output goes: results (and --json) on stdout; progress, warnings and logs on stderr.

Progress bars appear only on an interactive stderr, so CI logs stay clean; rich
honours NO_COLOR by itself.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtconv.errors import ExitCode, OutputError
from trtconv.outputs import dumps_json


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own handler exits with status 1, which trtconv reserves for its bugs;
        # hand the closed pipe to trtconv.cli.main, which ends with IO_ERROR instead.
        raise BrokenPipeError


def stdout_console() -> Console:
    return _Console(file=sys.stdout, highlight=False, soft_wrap=True)


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def print_json(obj: Any) -> None:
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


def progress(transient: bool = True) -> Progress:
    """A progress bar on stderr, disabled when stderr is not a terminal."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=transient,
        disable=not sys.stderr.isatty(),
    )


def finish(code: ExitCode | int) -> NoReturn:
    """End a command with a documented exit code (click ignores return values)."""
    raise click.exceptions.Exit(int(code))
