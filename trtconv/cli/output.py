"""Where output goes: results (and --json) on stdout; progress, warnings and logs on stderr.

Progress bars appear only on an interactive stderr, so CI logs stay clean; rich
honours NO_COLOR by itself.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtconv.errors import ExitCode
from trtconv.outputs import dumps_json


def stdout_console() -> Console:
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def print_json(obj: Any) -> None:
    sys.stdout.write(dumps_json(obj))
    sys.stdout.flush()


def warn(message: str) -> None:
    click.echo(f"trtconv: warning: {message}", err=True)


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
