"""``trtconv build``: ONNX to a verified TensorRT engine plus its manifest, in one command."""

from __future__ import annotations

import functools
import logging
import shlex
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from trtconv import api
from trtconv.api import (
    DCN_TARGETS,
    BuildOutcome,
    BuildSettings,
    identity_problems,
    large_weights,
    layer_rows,
    manifest_path,
    off_precision,
    read_manifest,
    return_large_blocks,
)
from trtconv.cli.cache import cache_option, gpu_identity
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.html_report import record, report_option
from trtconv.cli.inspect_engine import off_precision_lines
from trtconv.cli.options import (
    force_option,
    json_option,
    model_argument,
    options_for,
    output_option,
    shapes_hint_runs,
    target_or_default,
)
from trtconv.cli.output import Heartbeat, interactive, print_json, progress, stderr_console, warn_int8_only
from trtconv.cli.precision_report import print_gate
from trtconv.cli.quantize_command import quiet_random_samples
from trtconv.cli.triton_repo import triton_repo_option
from trtconv.errors import DataError, ExitCode, TrtconvError, UsageError
from trtconv.outputs import check_output_dir, check_output_path

F = TypeVar("F", bound=Callable[..., Any])


class BarSink:
    """TensorRT's progress monitor → a rich progress bar on stderr (one task per build phase)."""

    def __init__(self) -> None:
        self.bar = progress()
        self.tasks: dict[str, Any] = {}
        self.lock = threading.Lock()

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        with self.lock:
            label = ("  " if parent else "") + name
            self.tasks[name] = self.bar.add_task(label, total=steps if steps > 0 else None)

    def step(self, name: str, step: int) -> None:
        with self.lock:
            if name in self.tasks:
                self.bar.update(self.tasks[name], completed=step + 1)

    def phase_finish(self, name: str) -> None:
        with self.lock:
            task = self.tasks.pop(name, None)
            if task is not None:
                self.bar.remove_task(task)


class StageClock:
    """The pipeline's stage events → ``trtconv: <stage>: done (1.2 s)`` lines (not under --json or
    -q), and while a stage runs a sign of life at least every ~5 s: in a pipe a
    ``trtconv: <stage>: running (10 s)`` line (:class:`Heartbeat`), on a terminal a bar task with
    its elapsed time."""

    def __init__(self, sink: BarSink, *, as_json: bool) -> None:
        self.sink = sink
        self.console = stderr_console()
        self.quiet = not logging.getLogger("trtconv").isEnabledFor(logging.WARNING)  # -q
        self.durations = not (as_json or self.quiet)
        self.beat = Heartbeat("", lock=sink.lock)
        self.task: Any = None

    def __call__(self, stage: str, status: str) -> None:
        if status == "running":
            self.close()
            self.beat = Heartbeat(stage, lock=self.sink.lock)
            self.beat.start()
            if interactive(sys.stderr) and not self.quiet:
                with self.sink.lock:
                    self.task = self.sink.bar.add_task(stage, total=None)
            return
        seconds = self.close()
        if self.durations:
            took = f" ({seconds:.1f} s)" if not status.startswith("skipped") else ""
            self.console.print(f"trtconv: {stage}: {status}{took}", markup=False, highlight=False)

    def close(self) -> float:
        """Stop the stage's heartbeat and bar (also when the command ends); its seconds."""
        seconds = self.beat.stop()
        if self.task is not None:
            with self.sink.lock:
                self.sink.bar.remove_task(self.task)
            self.task = None
        return seconds


def _outputs(params: Mapping[str, Any]) -> list[Path]:
    """The files this run writes: --deps targets, --cache-dir entries."""

    return BuildSettings.from_params(params).outputs(params["output"])


def _off(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The manifest's compute layers that missed the requested precision, with trtconv's reason."""
    table = manifest.get("layers") or {}
    return off_precision(layer_rows(table.get("layers") or []), manifest.get("precision") or {},
                         str(table.get("source") or "engine"))


def _layer_summary(manifest: Mapping[str, Any]) -> list[str]:
    requested = (manifest.get("precision") or {}).get("requested")
    if requested == "fp32":
        return ["--layers: fp32 asked for; every layer runs as the graph types it"]
    return off_precision_lines(_off(manifest), requested)


def _key_extra(params: Mapping[str, Any]) -> dict[str, Any]:
    """An engine is valid for one GPU and driver, and is the engine its identity (ONNX, settings,
    TensorRT, plugins, target) names; a prepared ONNX is tied to none of these."""
    if params.get("prepare_only"):
        return {}
    try:
        ident = api.engine_identity_hash(params["model"], params["output"], BuildSettings.from_params(params))
    except TrtconvError:  # a bad flag or model: the run itself reports it
        ident = None
    return {**gpu_identity(), "identity": ident}


def _entry_problems(params: Mapping[str, Any], key: Mapping[str, Any], files: Mapping[str, Path]) -> list[str]:
    """Why a stored build must not be restored: its engine or manifest does not hold the identity asked for."""
    ident = (key.get("extra") or {}).get("identity")
    manifest = files.get(manifest_path(Path(params["output"])).name)
    engine = files.get(Path(params["output"]).name)
    if ident is None or manifest is None:
        return []
    try:
        data = read_manifest(manifest)
    except (DataError, OSError) as exc:
        return [f"its manifest is unreadable ({exc})"]
    return identity_problems(data, engine, expected_hash=ident)


def _check_outputs(ctx: click.Context) -> None:
    """Before any work, a cache lookup included: a Triton repository only for a target Triton serves,
    and every path the build writes (engine, manifest, prepared ONNX, tail, calibration cache, report,
    Triton repository, depfile) writable, in one line naming the flag; nothing is written."""
    params = ctx.params
    settings = BuildSettings.from_params(params)
    target = settings.trt or api.default_target()[0]
    repo = params.get("triton_repo")
    if repo is not None and settings.prepare_only:  # a repository holds an engine: asked for, never skipped silently
        raise UsageError("--triton-repo needs an engine, and --prepare-only builds none",
                         hint=replace(settings, prepare_only=False).command_line(
                             params["model"], params["output"], drop=("prepare_only",),
                             extra=("--triton-repo", shlex.quote(str(repo)))))
    if repo is not None:
        why = api.unservable(api.target_name(target))
        if why is not None:
            named = ("triton-repo in the spec file" if ctx.get_parameter_source("triton_repo") == ParameterSource.DEFAULT_MAP
                     else "--triton-repo")
            chosen = "" if settings.trt else f" (the target without --trt: {api.target_name(target)}, installed here)"
            raise UsageError(f"{named}: {why}{chosen}",
                             hint="drop it for TensorRT-RTX; for Triton, build with --trt 10.16 or --trt 11.4 "
                             "where TensorRT and a GPU are")
        if not settings.prepare_only:  # the repository, then the model's folder in it
            check_output_dir(Path(repo), flag="--triton-repo")
            check_output_dir(Path(repo) / api.model_name(Path(params["output"])), flag="--triton-repo")
    settings.check_outputs(params["output"], target, force=bool(params.get("force")), model=params.get("model"))
    for key in ("report", "deps"):
        if params.get(key) is not None:
            check_output_path(Path(params[key]), force=True, flag=f"--{key}")


def outputs_checked(f: F) -> F:
    """Run :func:`_check_outputs` first (place it right below ``config_option``: a --print-config writes nothing)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _check_outputs(click.get_current_context())
        return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


PATH_FLAGS = (("triton_repo", "--triton-repo"), ("report", "--report"), ("deps", "--deps"), ("cache_dir", "--cache-dir"))
NOT_INPUTS = ("prepared", "timing_cache")  # path flags that are not inputs (the build updates the cache)
SHAPE_FLAGS = ("shapes", "min_shapes", "opt_shapes", "max_shapes")  # a shapes hint gives its own


@click.command("build")
@model_argument
@output_option(help="The engine file to write (its manifest goes to ENGINE.json).")
@options_for("build", choices={"dcn_target": DCN_TARGETS})
@click.option("--layers", is_flag=True,
              help="After the build, list the compute layers that did not get --precision, with the reason.")
@force_option
@json_option
@config_option
@outputs_checked
@deps_option(outputs=_outputs, not_inputs=NOT_INPUTS)
@triton_repo_option
@report_option
@cache_option(outputs=_outputs, not_inputs=NOT_INPUTS, key_extra=_key_extra, validate=_entry_problems)
@shapes_hint_runs
def build(model: Path, output: Path, force: bool, as_json: bool, layers: bool, **params: Any) -> None:
    """Build MODEL into a TensorRT engine: check, rewrite, precision, build, verify.

    Writes ENGINE, ENGINE.json (manifest) and the prepared ONNX TensorRT parsed. Exit 0: built
    and verified; 9: TensorRT or GPU missing (--keep-prepared keeps the prepared ONNX); 8: precision not
    reached; 7: engine differs from ONNX Runtime; 6: TensorRT failed; 5: unsupported nodes.
    Without --trt the target is the TensorRT that is installed (said in one line on stderr).
    """

    settings = BuildSettings.from_params(params)
    settings.contradictions()  # exit 2 before any work
    unused = settings.unused_with_prepare_only() + (["--layers"] if layers and settings.prepare_only else [])
    if unused:
        logging.getLogger("trtconv").warning("%s %s no effect with --prepare-only: no engine is built",
                                             ", ".join(unused), "has" if len(unused) == 1 else "have")
    if settings.precision == "fp16":
        warn_int8_only(settings.values())
    settings = replace(settings, trt=target_or_default(settings.trt, as_json))
    if large_weights(model):  # freed weights and activations leave the RSS (issue 20's memory bound); below that
        return_large_blocks()  # size glibc's reuse of freed blocks saves the page faults (docs/benchmarks.md)
    cli_flags = tuple(f for f, on in (("--force", force), ("--json", as_json), ("--layers", layers)) if on)
    ctx = click.get_current_context()  # the wrappers' own paths, so a hint repeats the whole command
    cli_flags += tuple(f"{flag} {shlex.quote(str(ctx.params[key]))}" for key, flag in PATH_FLAGS
                       if ctx.params.get(key) is not None)
    command = settings.command_line(model, output, drop=SHAPE_FLAGS, extra=cli_flags)  # what hints repeat
    sink = BarSink()
    outcome = BuildOutcome(prepared=settings.outputs(output)[0])
    clock = StageClock(sink, as_json=as_json)
    try:
        with sink.bar, quiet_random_samples(settings.precision, settings.random_data):
            # Always installed: it draws only on a terminal, and lets Ctrl-C cancel a build cleanly.
            api.build(model, output, settings, force=force, say=clock, progress=sink, outcome=outcome,
                      command=command)
    except TrtconvError as exc:
        _record(outcome, model, settings.trt)
        if not as_json and outcome.gate is not None:
            # the precision stage's own exit 8 came before its judgement; the engine's (its share of layers in the
            # precision, checked after TensorRT built it) came after a gate that ran, and the gate line says how
            refused = exc.exit_code == ExitCode.PRECISION_NOT_ACHIEVED and any(
                st.name == "precision" and st.status == "failed" for st in outcome.stages)
            print_gate(outcome.gate, model, outcome.prepared, exc if refused else None)
        if as_json:  # CI still gets the stages and where it stopped; the error goes to stderr as usual
            if outcome.stopped is None:
                outcome.stopped = "error"
            print_json({**outcome.to_json(), "manifest_data": outcome.manifest,
                        "error": {"exit_code": int(exc.exit_code), "message": exc.message, "hint": exc.hint}})
        raise
    finally:
        clock.close()
    _record(outcome, model, settings.trt)
    if as_json:
        extra = {"off_precision": _off(outcome.manifest)} if layers and outcome.manifest is not None else {}
        print_json({**outcome.to_json(), "manifest_data": outcome.manifest, "error": None, **extra})
        return
    if outcome.gate is not None:
        print_gate(outcome.gate, model, outcome.prepared)
    if outcome.stopped == "prepare-only":
        click.echo(f"prepared ONNX written to {outcome.prepared} (--prepare-only: TensorRT not run)")
    elif outcome.engine is not None:
        click.echo(f"engine written to {outcome.engine} (manifest {outcome.engine}.json)")
    if outcome.tail is not None:
        click.echo(_tail_line(outcome))
    if outcome.parser_disagreements:
        nodes = _some([f"{d['node']} ({d['op']})" for d in outcome.parser_disagreements])
        click.echo(f"check predicted a refusal of {nodes}; the real parser took it (parser_disagreements in the "
                   "manifest)")
    click.echo(f"verification: {outcome.to_json()['verification']['summary']}")
    if outcome.engine is not None and outcome.stopped != "prepare-only":
        if layers and outcome.manifest is not None:
            for line in _layer_summary(outcome.manifest):
                click.echo(line)


def _tail_line(outcome: BuildOutcome) -> str:
    """--split-tail: where the tail is, what crosses the cut, and the proof's figure."""
    split = next((s.detail for s in outcome.stages if s.name == "split" and s.status == "done"), {})
    proof = split.get("proof") or {}
    if proof.get("passed"):
        figure = (f"head → tail equals the model on ONNX Runtime: max abs {proof.get('max_abs'):.3g}, "
                  f"max rel {proof.get('max_rel'):.3g}")
    else:
        figure = f"not proven: {proof.get('reason') or 'no reason recorded'}"
    return (f"tail written to {outcome.tail} (ONNX Runtime runs it on the engine's outputs "
            f"{_some(split.get('cut') or [])}; it starts at {_some(split.get('at') or [])}; {figure})")


def _some(names: list[str], shown: int = 4) -> str:
    """The first names, and how many more (the manifest's split block lists them all)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _record(outcome: BuildOutcome, model: Path, target: str) -> None:
    """What --report shows of a build: the model's per-node check, the precision gate, the manifest."""
    if click.get_current_context().params.get("report") is None:
        return
    try:
        record("check", api.check(model, trt=target).to_json())
    except TrtconvError:  # the build's own error says what is wrong with the model
        pass
    if outcome.gate is not None:
        record("gate", outcome.gate.to_json())
    record("verification", outcome.to_json()["verification"])
    if outcome.manifest is not None:
        record("manifest", outcome.manifest)
