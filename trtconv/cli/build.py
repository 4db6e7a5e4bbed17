"""``trtconv build``: ONNX to a verified TensorRT engine plus its manifest, in one command."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from trtconv.api import BuildSettings, engine_identity_hash
from trtconv.api import build as api_build
from trtconv.api import check as api_check
from trtconv.cli.cache import cache_option, gpu_identity
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.html_report import record, report_option
from trtconv.cli.inspect_engine import off_precision_lines
from trtconv.cli.options import (
    command_line,
    exclude_options,
    force_option,
    gate_options,
    int8_options,
    json_option,
    model_argument,
    output_option,
    quantize_settings,
    sample_options,
    skip_rule_option,
    trt_version_option,
)
from trtconv.cli.output import Heartbeat, interactive, print_json, progress, stderr_console
from trtconv.cli.precision_report import print_gate
from trtconv.cli.triton_repo import triton_repo_option
from trtconv.errors import DataError, TrtconvError
from trtconv.inspection import layer_rows, off_precision
from trtconv.load import return_large_blocks
from trtconv.pipeline import BuildOutcome
from trtconv.plan import (
    DEFAULT_MIN_PRECISION_SHARE,
    DEFAULT_OPT_LEVEL,
    HARDWARE_COMPAT,
    PRECISIONS,
    identity_problems,
    manifest_path,
    read_manifest,
)
from trtconv.rewrites import DCN_TARGETS


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
            took = f" ({seconds:.1f} s)" if status != "skipped" else ""
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

    settings = BuildSettings(prepared=params.get("prepared"), prepare_only=bool(params.get("prepare_only")))
    return settings.outputs(params["output"])


def _settings(params: Mapping[str, Any]) -> BuildSettings:
    """The command's click params as the API's BuildSettings (the run and the cache key share it)."""
    get = params.get
    precision = get("precision", "fp32")
    precision_flags = {k: v for k, v in params.items() if k not in _BUILD_FIELDS}
    quantize = quantize_settings(precision, {**precision_flags, "shapes": get("shapes")}) if precision != "fp32" else None
    return BuildSettings(
        precision=precision, calib_data=get("calib_data"), calib_limit=get("max_samples") or 0,
        quantize=quantize, shapes=get("shapes"), min_shapes=get("min_shapes", ()), opt_shapes=get("opt_shapes", ()),
        max_shapes=get("max_shapes", ()), workspace=get("workspace"), memory_pools=get("memory_pools", ()),
        timing_cache=get("timing_cache"), use_timing_cache=not get("no_timing_cache"), opt_level=get("opt_level"),
        hardware_compat=get("hardware_compat", "none"), compute_capabilities=get("compute_capabilities", ()),
        version_compatible=bool(get("version_compatible")), exclude_lean_runtime=bool(get("exclude_lean_runtime")),
        plugins=get("plugins", ()), min_precision_share=get("min_precision_share"), dcn_target=get("dcn_target"),
        skip_rules=tuple(get("skip_rules", ())), prepared=get("prepared"), prepare_only=bool(get("prepare_only")),
        keep_prepared=bool(get("keep_prepared")), verify=not get("no_verify"),
        preflight=not get("no_preflight"), seed=get("seed", 0), trt=get("trt_version"),
    )


_BUILD_FIELDS = frozenset({
    "model", "output", "precision", "shapes", "min_shapes", "opt_shapes", "max_shapes", "workspace", "memory_pools",
    "timing_cache", "no_timing_cache", "opt_level", "hardware_compat", "compute_capabilities", "version_compatible",
    "exclude_lean_runtime", "plugins", "min_precision_share", "dcn_target", "skip_rules", "prepared", "prepare_only", "keep_prepared", "no_verify",
    "no_preflight",
    "seed", "trt_version", "force", "as_json", "layers", "triton_repo", "report", "cache_dir", "deps", "config",
    "print_config"})


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
        ident = engine_identity_hash(params["model"], params["output"], _settings(params))
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


NOT_INPUTS = ("prepared", "timing_cache")  # path flags that are not inputs (the build updates the cache)
SHAPE_FLAGS = ("shapes", "min_shapes", "opt_shapes", "max_shapes")  # a shapes hint gives its own


@click.command("build")
@model_argument
@output_option(help="The engine file to write (its manifest goes to ENGINE.json).")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="Made explicit in the ONNX (FP16 casts / INT8 Q-DQ), then built strongly typed.")
@sample_options
@exclude_options
@int8_options
@gate_options
@click.option("--shapes", metavar="NAME:DxD,...", help="One profile with min = opt = max (trtexec --shapes).")
@click.option("--min-shapes", multiple=True, metavar="NAME:DxD,...", help="Profile minimum; repeat per profile.")
@click.option("--opt-shapes", multiple=True, metavar="NAME:DxD,...", help="Profile optimum; repeat per profile.")
@click.option("--max-shapes", multiple=True, metavar="NAME:DxD,...", help="Profile maximum; repeat per profile.")
@click.option("--workspace", metavar="SIZE", help="Workspace memory pool limit, e.g. 4G.")
@click.option("--memory-pool", "memory_pools", multiple=True, metavar="POOL:SIZE",
              help="Any memory pool limit, e.g. tactic_shared_memory:48K (repeatable).")
@click.option("--timing-cache", type=click.Path(path_type=Path, dir_okay=False),
              help="Timing cache file (default: one per GPU and TensorRT version under ~/.cache/trtconv).")
@click.option("--no-timing-cache", is_flag=True, help="Neither load nor save a timing cache.")
@click.option("--opt-level", "--builder-optimization-level", "opt_level", type=click.IntRange(0, 5),
              default=DEFAULT_OPT_LEVEL, show_default=True, help="TensorRT builder optimization level.")
@click.option("--hardware-compat", type=click.Choice(HARDWARE_COMPAT), default="none", show_default=True,
              help="Build for other GPUs too (ampere+ or same compute capability); may be slower.")
@click.option("--compute-capability", "compute_capabilities", multiple=True, metavar="CC,...",
              help="--trt rtx: compute capabilities to build for, e.g. 8.6,8.9 (repeatable; "
              "default: RTX's portable set 8.0 8.6 8.9 12.0 12.1).")
@click.option("--version-compatible", is_flag=True, help="Engine runs on later TensorRT versions (lean runtime).")
@click.option("--exclude-lean-runtime", is_flag=True, help="With --version-compatible: do not embed the runtime.")
@click.option("--plugins", "plugins", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Extra TensorRT plugin library to load (repeatable).")
@click.option("--min-precision-share", type=click.FloatRange(0, 1), default=DEFAULT_MIN_PRECISION_SHARE,
              show_default=True, help="fp16/int8: fail (exit 8) if fewer compute layers run in that precision.")
@click.option("--dcn-target", type=click.Choice(DCN_TARGETS),
              help="How rewrite turns DCNv2 nodes into parseable ones (default: rewrite's default).")
@skip_rule_option
@click.option("--prepared", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the prepared ONNX (default: ENGINE stem + .prepared.onnx).")
@click.option("--prepare-only", is_flag=True, help="Stop after writing the prepared ONNX (no TensorRT needed).")
@click.option("--keep-prepared", is_flag=True,
              help="Keep the prepared ONNX when the build fails (for debugging); by default a failed build "
              "leaves nothing.")
@click.option("--no-verify", is_flag=True, help="Skip comparing the engine with ONNX Runtime.")
@click.option("--no-preflight", is_flag=True,
              help="Skip running the graph at every profile corner on ONNX Runtime before the TensorRT build.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for proofs and verification inputs.")
@click.option("--layers", is_flag=True,
              help="After the build, list the compute layers that did not get --precision, with the reason.")
@trt_version_option
@force_option
@json_option
@config_option
@deps_option(outputs=_outputs, not_inputs=NOT_INPUTS)
@triton_repo_option
@report_option
@cache_option(outputs=_outputs, not_inputs=NOT_INPUTS, key_extra=_key_extra, validate=_entry_problems)
def build(model: Path, output: Path, precision: str, shapes: str | None,
          min_shapes: tuple[str, ...], opt_shapes: tuple[str, ...], max_shapes: tuple[str, ...],
          workspace: str | None, memory_pools: tuple[str, ...], timing_cache: Path | None, no_timing_cache: bool,
          opt_level: int, hardware_compat: str, compute_capabilities: tuple[str, ...], version_compatible: bool, exclude_lean_runtime: bool,
          plugins: tuple[Path, ...], min_precision_share: float, dcn_target: str | None, skip_rules: tuple[str, ...],
          prepared: Path | None,
          prepare_only: bool, keep_prepared: bool, no_verify: bool, no_preflight: bool, seed: int, layers: bool, trt_version: str,
          force: bool, as_json: bool,
          **precision_flags: Any) -> None:
    """Build MODEL into a TensorRT engine: check, rewrite, precision, build, verify.

    Writes ENGINE, ENGINE.json (manifest) and the prepared ONNX TensorRT parsed. Exit 0: built
    and verified; 9: TensorRT or GPU missing (--keep-prepared keeps the prepared ONNX); 8: precision not
    reached; 7: engine differs from ONNX Runtime; 6: TensorRT failed; 5: unsupported nodes.
    """

    return_large_blocks()  # freed weights and activations leave the RSS (issue 20's memory bound)
    ctx = click.get_current_context()
    settings = replace(_settings(ctx.params), command=command_line(ctx, drop=SHAPE_FLAGS))
    sink = BarSink()
    outcome = BuildOutcome(prepared=settings.outputs(output)[0])
    clock = StageClock(sink, as_json=as_json)
    try:
        with sink.bar:
            # Always installed: it draws only on a terminal, and lets Ctrl-C cancel a build cleanly.
            api_build(model, output, settings, force=force, say=clock, progress=sink, outcome=outcome)
    except TrtconvError as exc:
        _record(outcome, model, settings.trt)
        if not as_json and outcome.gate is not None:
            print_gate(outcome.gate, model, outcome.prepared)
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
        if layers and outcome.manifest is not None:
            for line in _layer_summary(outcome.manifest):
                click.echo(line)


def _record(outcome: BuildOutcome, model: Path, target: str) -> None:
    """What --report shows of a build: the model's per-node check, the precision gate, the manifest."""
    if click.get_current_context().params.get("report") is None:
        return
    try:
        record("check", api_check(model, trt=target).to_json())
    except TrtconvError:  # the build's own error says what is wrong with the model
        pass
    if outcome.gate is not None:
        record("gate", outcome.gate.to_json())
    if outcome.manifest is not None:
        record("manifest", outcome.manifest)
