"""The ``trtconv`` command group: the one place that turns errors into exit codes.

Commands live in their own modules and are imported only when invoked, so
``trtconv --help`` stays fast and a missing optional dependency of one command
cannot break the others.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import click

from trtconv import __version__
from trtconv.cli.command_line import retry_command
from trtconv.errors import ExitCode, OutOfMemoryError, TrtconvError, is_allocation_failure
from trtconv.outputs import dumps_json, remove_own_temps

# command name -> "module:attribute". Add a command by adding a line here.
COMMANDS: dict[str, str] = {
    "check": "trtconv.cli.check_command:check",
    "doctor": "trtconv.cli.doctor_command:doctor",
    "build": "trtconv.cli.build_command:build",
    "verify": "trtconv.cli.verify_command:verify",
    "bench": "trtconv.cli.bench_command:bench",
    "quantize": "trtconv.cli.quantize_command:quantize",
    "rewrite": "trtconv.cli.rewrite_command:rewrite",
    "inspect": "trtconv.cli.inspect_engine:inspect",
    "triton-repo": "trtconv.cli.triton_repo:triton_repo",
}

TRACEBACK_KEY = "trtconv.traceback"
# The command's model path and a function giving its weights' bytes (cli.options.model_argument),
# for the out-of-memory message.
MODEL_KEY = "trtconv.model"
MODEL_BYTES_KEY = "trtconv.model-bytes"
JSON_KEY = "trtconv.json"  # --json was given (cli.options.json_option): a failure prints a JSON error object
JSON_PRINTED_KEY = "trtconv.json-printed"  # the command printed its own JSON report (cli.output.print_json)
VERBOSE_HELP = "More log output on stderr (-vv for debug)."


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use, with trtconv's error policy."""

    words: Sequence[str] = ()  # the command line, for a failure before the command parsed it (its --json)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attr = COMMANDS[cmd_name].partition(":")
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command)
            if not any(p.name == "quiet" for p in cmd.params):  # `trtconv check -q m.onnx` too
                cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False,
                                               callback=_quiet_callback, help="Only errors on stderr."))
            if not any(p.name == "verbose" for p in cmd.params):  # `trtconv build m.onnx -v` too: the lines
                # that say "-v shows all" are read after the command was typed, and -v is added at its end
                cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False,
                                               callback=_verbose_callback, help=VERBOSE_HELP))
            return cmd
        return super().get_command(ctx, cmd_name)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """click's own main, with its usage errors in trtconv's one format (``trtconv: error:`` and a hint)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        self.words = list(sys.argv[1:] if args is None else args)  # for a failure before the command parsed them
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.ClickException as exc:
            hint = _report_usage(exc)
            if "--json" in self.words:  # a usage error too is a failure a CI script must be able to parse
                _print_error_json(next((w for w in self.words if w in COMMANDS), None), exc.exit_code,
                                  usage_message(exc), hint)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:  # Ctrl-C before the command ran (its module loading, its options)
            remove_own_temps()
            click.echo("trtconv: interrupted; no partial output was left behind", err=True)
            if "--json" in self.words:  # as when the command itself is interrupted: stdout is JSON
                _print_error_json(next((w for w in self.words if w in COMMANDS), None), int(ExitCode.INTERRUPTED),
                                  "interrupted; no partial output was left behind", None)
            sys.exit(int(ExitCode.INTERRUPTED))
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutOfMemoryError as exc:
            _report_out_of_memory(ctx, exc, exc.message.removeprefix("out of memory while "))
            _json_failure(ctx, ExitCode.OUT_OF_MEMORY, exc.message, exc.hint)
            raise click.exceptions.Exit(int(ExitCode.OUT_OF_MEMORY)) from None
        except TrtconvError as exc:
            exc.hint = retry_command(self.words, exc) or exc.hint
            _report_error(ctx, exc)
            _json_failure(ctx, exc.exit_code, exc.message, exc.hint)
            raise click.exceptions.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            remove_own_temps()  # also a temp the interrupt caught between creation and `try`
            click.echo("trtconv: interrupted; no partial output was left behind", err=True)
            if JSON_KEY not in ctx.meta and "--json" in self.words:
                ctx.meta[JSON_KEY] = True  # Ctrl-C while the command was loading, before its --json was parsed
            _json_failure(ctx, ExitCode.INTERRUPTED, "interrupted; no partial output was left behind")
            raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:
            # The reader of stdout went away (`trtconv check --json | head`): nothing is
            # wrong with the work; stop quietly, and keep Python's exit-time flush silent.
            _silence_stdout()
            raise click.exceptions.Exit(int(ExitCode.IO_ERROR)) from None
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            if is_allocation_failure(exc):
                _report_out_of_memory(ctx, exc, _stage_of(exc))
                raise click.exceptions.Exit(int(ExitCode.OUT_OF_MEMORY)) from None
            click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo(
                "trtconv: internal error (a bug in trtconv). Please report it with the traceback above.",
                err=True,
            )
            _json_failure(ctx, ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}",
                          "a bug in trtconv: please report it with the traceback on stderr")
            raise click.exceptions.Exit(int(ExitCode.INTERNAL)) from None


def _json_failure(ctx: click.Context, code: int, message: str, hint: str | None = None) -> None:
    """With --json, a command that fails before printing its own report prints a JSON error
    object on stdout (docs/cli.md), so a script reading stdout always gets JSON."""
    if ctx.meta.get(JSON_KEY) and not ctx.meta.get(JSON_PRINTED_KEY):
        words = getattr(ctx.command, "words", ())  # the command's name, also before click resolved it
        _print_error_json(ctx.invoked_subcommand or next((w for w in words if w in COMMANDS), None), code, message,
                          hint)


def _print_error_json(command: str | None, code: int, message: str, hint: str | None) -> None:
    """Schema ``trtconv.error/1``; ``error`` has the fields of ``build --json``'s ``error``."""
    name = ExitCode(code).name if code in {int(c) for c in ExitCode} else None
    doc = {"schema": "trtconv.error/1", "command": command,
           "error": {"exit_code": int(code), "name": name, "message": message, "hint": hint}}
    with contextlib.suppress(Exception):  # stdout closed or full: the stderr line stands alone
        sys.stdout.write(dumps_json(doc))
        sys.stdout.flush()


# Where a failed allocation happened, by the innermost trtconv module on the stack.
_STAGES = (
    ("trtconv.load.save", "writing the output"), ("trtconv.outputs", "writing the output"),
    ("trtconv.load", "reading the model"), ("trtconv.reference", "running ONNX Runtime"),
    ("trtconv.samples", "reading the samples"), ("trtconv.rewrites", "rewriting the model"),
    ("trtconv.precision.int8.calibrat", "calibrating"), ("trtconv.precision.peaks", "calibrating"),
    ("trtconv.precision", "converting the precision"), ("trtconv.analyze", "analysing the model"),
    ("trtconv.trt", "building the engine"), ("trtconv.verify", "verifying the engine"),
    ("trtconv.bench", "benchmarking"), ("trtconv.plan", "planning the build"),
)


def _stage_of(exc: BaseException) -> str:
    """What trtconv was doing when ``exc`` was raised, in words."""
    stage = "running"
    for frame, _line in traceback.walk_tb(exc.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        stage = next((words for prefix, words in _STAGES if module.startswith(prefix)), stage)
    return stage


def _report_out_of_memory(ctx: click.Context, exc: BaseException, stage: str) -> None:
    """One line for a failed allocation: where, how large the model is, what to do.

    The traceback's frames hold the work's arrays and protos: they are cleared first, so
    that writing the message (and removing temp files) has memory to run in."""
    if ctx.meta.get(TRACEBACK_KEY):
        click.echo("".join(traceback.format_exception(exc)), err=True, nl=False)
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
    remove_own_temps()
    model, sizer = ctx.meta.get(MODEL_KEY), ctx.meta.get(MODEL_BYTES_KEY)
    try:
        size = sizer() if sizer is not None else None
    except Exception:  # an unreadable model has no size to report; the error line stands without it
        size = None
    need = (f": {model} holds {size / 2**30:.2f} GiB of weights, and trtconv needs up to about "
            f"{(1.5 * size + 2**30) / 2**30:.1f} GiB (1.5 x the model + 1 GiB)" if size else "")
    click.echo(f"trtconv: error: out of memory while {stage}{need}; nothing was written", err=True)
    click.echo("  hint: free memory, or raise the limit (ulimit -v, the container's memory limit)", err=True)


def usage_message(exc: click.exceptions.ClickException) -> str:
    """click's message on one line (a missing choice option lists its choices on lines of their own)."""
    return " ".join(exc.format_message().split())


def _report_usage(exc: click.exceptions.ClickException) -> str | None:
    """``trtconv: error: <what>`` and ``  hint: <where to look>``, like every other error; returns the hint."""
    click.echo(f"trtconv: error: {usage_message(exc)}", err=True)
    ctx = getattr(exc, "ctx", None)
    if not isinstance(exc, click.UsageError):
        return None
    hint = f"`{ctx.command_path if ctx is not None else 'trtconv'} --help` lists the options"
    click.echo(f"  hint: {hint}", err=True)
    return hint


def _quiet_callback(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _set_log_level(logging.ERROR)


def _verbose_callback(_ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value:
        _set_log_level(verbosity_level(value))


def verbosity_level(verbose: int) -> int:
    """The log level of ``-v`` given ``verbose`` times (0: warnings, 1: info, 2 or more: debug)."""
    return (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]


class _StderrHandler(logging.Handler):
    """Log records as ``trtconv: warning: ...`` on the stderr of the moment (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            source = "tensorrt " if record.name.startswith("trtconv.tensorrt") else ""  # TensorRT's own words
            click.echo(f"trtconv: {source}{record.levelname.lower()}: {record.getMessage()}", err=True)
        except Exception:  # a log line must never be the thing that fails
            self.handleError(record)


def _set_log_level(level: int) -> None:
    logger = logging.getLogger("trtconv")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(level)  # records still propagate: the root logger has no handler unless a host adds one


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Python warnings in the CLI's voice: one ``trtconv: warning:`` line, no source line."""
    text = str(message)
    if text.startswith("calibrating on RANDOM data"):
        return  # the samples module logs the same words as a warning
    if logging.getLogger("trtconv").isEnabledFor(logging.WARNING):
        click.echo(f"trtconv: warning: {text}", err=True)


def _report_error(ctx: click.Context, exc: TrtconvError) -> None:
    if ctx.meta.get(TRACEBACK_KEY) or exc.exit_code == ExitCode.INTERNAL:
        click.echo(traceback.format_exc(), err=True, nl=False)
    click.echo(f"trtconv: error: {exc.message}", err=True)
    if exc.hint:
        click.echo(f"  hint: {exc.hint}", err=True)


def _version_text() -> str:
    lines = [f"trtconv {__version__}"]
    for dist in ("onnx", "onnxruntime", "onnx-graphsurgeon", "tensorrt", "tensorrt-rtx"):
        lines.append(f"{dist} {_dist_version(dist) or 'not installed'}")
    return "\n".join(lines)


def _dist_version(dist: str) -> str | None:

    names = {"tensorrt": ["tensorrt", "tensorrt-cu13", "tensorrt-cu12"],
             "tensorrt-rtx": ["tensorrt-rtx", "tensorrt-rtx-cu13", "tensorrt-rtx-cu12"]}.get(dist, [dist])
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit(0)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
    help="Show trtconv, onnx, onnxruntime and TensorRT versions.",
)
@click.option("--traceback", "show_traceback", is_flag=True, envvar="TRTCONV_TRACEBACK",
              help="Show the Python traceback of an error (for bug reports).")
@click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, show_traceback: bool, verbose: int, quiet: bool) -> None:
    """ONNX to TensorRT in one command. Results on stdout, progress and logs on stderr.

    Exit codes are listed in docs/exit-codes.md.
    """
    ctx.meta[TRACEBACK_KEY] = show_traceback
    level = logging.ERROR if quiet else verbosity_level(verbose)
    _set_log_level(level)
    warnings.showwarning = _show_warning


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass


_TERMINATING: list[int] = []


def _terminate(signum: int, _frame: Any) -> None:
    """SIGTERM (CI cancelling a job, `timeout`, docker stop) ends like Ctrl-C: temp files
    are removed on the way out and the exit code is 130, instead of dying mid-write. Once: a
    second SIGTERM (a process group's, and the `trtconv` launcher passing its own on) must not
    interrupt that cleanup."""
    if _TERMINATING:
        return
    _TERMINATING.append(signum)
    raise KeyboardInterrupt


def main() -> None:

    with contextlib.suppress(ValueError):  # not in the main thread
        signal.signal(signal.SIGTERM, _terminate)
    cli(prog_name="trtconv")
