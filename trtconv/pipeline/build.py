"""``trtconv build``: check → rewrite → precision → [TensorRT build] → verify, as one pipeline.

Every stage before the TensorRT build runs on the CPU, so the pipeline is useful
without TensorRT: it stops after writing the prepared ONNX (the explicit-precision,
rewritten graph TensorRT will parse) with TENSORRT_UNAVAILABLE, or on purpose with
``prepare_only``. Each stage is a function returning a frozen result; each thing is
computed once: the loaded model, its samples, the rewritten model, the graph ONNX
Runtime runs as the reference (:class:`Reference`) and that reference's outputs at the
profile corners (reused by verify). TensorRT is imported only inside ``_build_engine``.

Over 400 lines because it is one small function per stage plus the run that orders them;
the precision stage's gate is ``trtconv.pipeline.quantize``'s, not a copy.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import logging
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import onnx

from trtconv.analyze import analyze
from trtconv.errors import (
    AccuracyError,
    BackendUnavailableError,
    InvalidModelError,
    TrtconvError,
    UnsupportedModelError,
    UsageError,
)
from trtconv.load import LAZY_WEIGHTS_BYTES, LoadedModel, dynamic_inputs, load_model, model_sha256, save_model
from trtconv.onnxutil import iter_graphs, qualified_op
from trtconv.outputs import check_output_path
from trtconv.pipeline.build_identity import gpu_properties, request_identity
from trtconv.pipeline.build_settings import BuildSettings
from trtconv.pipeline.quantize import (
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    check_gate_outputs,
    check_quantize_settings,
    fp16_settings,
    run_int8,
    sample_set,
)
from trtconv.plan import (
    CORNERS,
    BuildPlan,
    CornerRuns,
    Profile,
    build_manifest,
    build_profiles,
    identity,
    manifest_path,
    plugin_fingerprints,
    run_corners,
    target_name,
    validate_plan,
    write_manifest,
)
from trtconv.precision import PHASES, Fp16AccuracyError, convert_fp16
from trtconv.reference import DEFAULT_THRESHOLDS, ort
from trtconv.rewrites import RewriteResult, RewriteSettings, rewrite, rewrite_rule_for
from trtconv.samples import SampleSet
from trtconv.settings import NEWEST_TENSORRT
from trtconv.trt import build_engine, for_target, probe, tensorrt_version
from trtconv.verify import verify_engine_corners

log = logging.getLogger(__name__)
StageFn = Callable[[str, str], None]  # (stage, message): progress lines for the CLI
T = TypeVar("T")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class StageRecord:
    name: str
    status: str  # "done" | "skipped" | "failed"
    seconds: float = 0.0
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3), **self.detail}


@dataclass
class BuildOutcome:
    """How far the pipeline got: filled in as it runs, so a caller sees it even when it raises."""

    prepared: Path
    engine: Path | None = None
    manifest: dict[str, Any] | None = None
    stages: list[StageRecord] = field(default_factory=list)
    stopped: str | None = None  # why the pipeline stopped before an engine, if it did
    gate: QuantizeResult | None = None  # fp16/int8: the precision stage's accuracy gate (also when it failed)
    written: bool = False  # the prepared ONNX is on disk (written by this run and not removed)

    def to_json(self) -> dict[str, Any]:
        """Names only files that are on disk: a failed build removed what it wrote."""
        return {
            "prepared_onnx": str(self.prepared) if self.written else None,
            "engine": str(self.engine) if self.engine else None,
            "manifest": str(manifest_path(self.engine)) if self.engine else None,
            "stopped": self.stopped,
            "stages": [s.to_json() for s in self.stages],
        }


@dataclass(frozen=True)
class Step(Generic[T]):
    """What a stage returns: its result for the stages after it, and its line in the report."""

    value: T
    detail: Mapping[str, Any] = field(default_factory=dict)
    status: str = "done"


@dataclass(frozen=True)
class Precisioned:
    model: onnx.ModelProto
    summary: Mapping[str, Any]  # the manifest's precision block
    calibration: Mapping[str, Any] | None = None
    gate: QuantizeResult | None = None  # fp16/int8: the accuracy gate's verdict


@dataclass(frozen=True)
class Saved:
    path: Path
    sha256: str
    graph: LoadedModel  # the prepared ONNX as written (structure only: no weight bytes)


@dataclass(frozen=True)
class Built:
    environment: Mapping[str, Any]
    precision: Mapping[str, Any]
    plugins_needed: tuple[str, ...]
    seconds: float
    engine_sha256: str
    extra: Mapping[str, Any] = field(default_factory=dict)  # layer table, bindings, plugin creators


@dataclass(frozen=True)
class ReferenceGraph:
    """A graph ONNX Runtime runs that computes what the user's model computes."""

    model: onnx.ModelProto
    path: Path | None  # where it is saved, if it is (ORT loads models over 2 GB only from disk)
    label: str


class Reference:
    """The user's model as ONNX Runtime can run it, found once and on first need: the model
    itself; else the rewritten graph (proven equal to it); else the model with its DCN nodes
    rewritten to ONNX DeformConv (when rewrite targeted a plugin ORT cannot run)."""

    def __init__(self, loaded: LoadedModel, rewritten: RewriteResult) -> None:
        self.loaded = loaded
        self.rewritten = rewritten

    @functools.cached_property
    def rewritten_runs(self) -> bool:
        return _ort_runnable(self.rewritten.model)

    @functools.cached_property
    def deformconv(self) -> onnx.ModelProto | None:
        """The model with DCN nodes rewritten to ONNX DeformConv (ONNX Runtime runs it), or None."""
        proto = self.loaded.proto
        if not any(rewrite_rule_for(n.domain, n.op_type) for g in iter_graphs(proto.graph) for n in g.node):
            return None  # no DCN op: nothing a DeformConv form would change
        try:
            return rewrite(self.loaded, RewriteSettings(dcn_target="deformconv", verify=False)).model
        except TrtconvError:
            return None

    @functools.cached_property
    def graph(self) -> ReferenceGraph | None:
        try:
            ort.session(self.loaded.path)
            return ReferenceGraph(self.loaded.proto, self.loaded.path, "original")
        except InvalidModelError:
            pass
        if self.rewritten_runs:
            return ReferenceGraph(self.rewritten.model, None, "rewritten")
        if self.deformconv is not None and _ort_runnable(self.deformconv):
            return ReferenceGraph(self.deformconv, None, "original with DCN as DeformConv")
        return None


class _Phases:
    """The precision passes' ``progress(stage, done, total)`` as phases of the build's progress
    sink (the one TensorRT's monitor feeds): a bar per phase on a terminal, lines in a log."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.current: str | None = None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        label = PHASES.get(stage, stage)
        if label != self.current:
            self.close()
            self.current = label
            self.sink.phase_start(label, None, total or 0)
        self.sink.step(label, done - 1)

    def close(self) -> None:
        if self.current is not None:
            self.sink.phase_finish(self.current)
        self.current = None


class _Stages:
    def __init__(self, outcome: BuildOutcome, say: StageFn | None) -> None:
        self.outcome = outcome
        self.say = say or (lambda stage, msg: None)

    def run(self, name: str, fn: Callable[[], Step[T]]) -> T:
        self.say(name, "running")
        start = time.monotonic()
        try:
            step = fn()
        except BaseException:
            self.outcome.stages.append(StageRecord(name, "failed", time.monotonic() - start))
            self.say(name, "failed")
            raise
        self.outcome.stages.append(StageRecord(name, step.status, time.monotonic() - start, dict(step.detail)))
        self.say(name, step.status)
        return step.value


def build(model: Path, output: Path, settings: BuildSettings, target: str, *, force: bool = False,
          say: StageFn | None = None, progress: Any = None, outcome: BuildOutcome | None = None,
          command: str | None = None) -> BuildOutcome:
    """The whole pipeline for ``target`` (a ``--trt`` value). Raises a TrtconvError subclass on failure
    (its exit code is the verdict); pass ``outcome`` to see how far it got (stages, prepared ONNX)
    when it raises. ``command``: the command line hints repeat (the CLI's, with the user's options;
    None: one made from the settings)."""
    req = settings
    settings.contradictions()
    plan = settings.plan(model, output, target, force=force)
    validate_plan(plan)  # option consistency first: no model needed
    if req.precision == "int8" and not _has_samples(req.quantize_settings()):
        raise UsageError("--precision int8 needs --calib-data", hint="give a folder of .npy/.npz samples or images")
    if req.precision != "fp32":
        check_quantize_settings(req.quantize_settings())
    prepared = req.prepared_path(output)
    # Every output is checked before minutes of work: the engine, its manifest, the prepared ONNX.
    if not req.prepare_only:
        check_output_path(output, force=plan.force)
        check_output_path(manifest_path(output), force=plan.force)
    # The prepared ONNX is derived data: its default path is rewritten (saying so); an explicit
    # --prepared path is treated like any output (exists → needs --force).
    check_output_path(prepared, force=plan.force or req.prepared is None)
    replacing = req.prepared is None and prepared.exists() and not plan.force
    outcome = outcome if outcome is not None else BuildOutcome(prepared=prepared)
    outcome.prepared = prepared
    stages = _Stages(outcome, say)

    # Large weights stay on disk through rewrite, FP16, INT8 and the save (streamed into the
    # prepared ONNX).
    loaded = load_model(model, lazy_from=LAZY_WEIGHTS_BYTES)
    _refuse_requantizing(loaded, req.precision)
    samples = sample_set(loaded.proto, req.quantize_settings())  # None: no sample data
    if samples is not None:
        next(iter(samples), None)  # names, shapes and dtypes of the data, before any heavy stage (exit 11)
    try:
        profiles = build_profiles(
            loaded.proto, shapes=req.shapes, min_shapes=req.min_shapes, opt_shapes=req.opt_shapes,
            max_shapes=req.max_shapes, required=not req.prepare_only,
            command=command or _command(model, output, req, target),
            sample_shapes=None if samples is None else _sample_shapes(samples))
    except UsageError:
        _check(loaded, target, {})  # a model no shapes could build says so first, with the reason (exit 5)
        raise
    plan = replace(plan, onnx_path=prepared, engine_path=output, profiles=profiles)
    onnx_sha = model_sha256(loaded)
    shapes0 = profiles[0].corner("opt") if profiles else {}

    stages.run("check", lambda: _check(loaded, target, shapes0))
    rewrite_settings = replace(req.rewrite_settings(target), proof_shapes=dict(shapes0))
    rewritten = stages.run("rewrite", lambda: _rewrite(loaded, rewrite_settings))
    reference = Reference(loaded, rewritten)
    phases = _Phases(progress) if progress is not None else None
    try:
        precisioned = stages.run("precision", lambda: _precision(rewritten.model, req, target, samples, reference, phases))
    except QuantizeAccuracyError as exc:
        outcome.gate = exc.result
        raise
    finally:
        if phases is not None:
            phases.close()
    outcome.gate = precisioned.gate
    if replacing:
        log.warning("replacing %s (derived from the model; --prepared PATH writes it elsewhere)", prepared)
    try:
        return _prepare_and_build(model, output, target, req, plan, outcome, stages, precisioned, reference,
                                  profiles, progress, onnx_sha, rewritten, shapes0, samples)
    except BaseException as exc:
        _remove_failed_outputs(output, req, outcome, exc)
        raise


def _remove_failed_outputs(output: Path, req: BuildSettings, outcome: BuildOutcome, exc: BaseException) -> None:
    """A failed build leaves nothing it wrote: engine, manifest, prepared ONNX (and its .data).
    Kept: everything when the engine's verification failed (exit 7: kept for inspection), and
    the prepared ONNX with ``keep_prepared`` (debugging, or building it elsewhere)."""
    if isinstance(exc, AccuracyError) and outcome.manifest is not None:
        return
    doomed = [manifest_path(output), output] if outcome.engine is not None else []
    if outcome.written and not req.keep_prepared:
        doomed += [outcome.prepared, outcome.prepared.with_name(outcome.prepared.name + ".data")]
        outcome.written = False
    outcome.engine = None
    outcome.manifest = None
    for path in doomed:
        try:
            path.unlink(missing_ok=True)
        except OSError as err:  # the original error is what the user must see
            log.warning("could not remove %s: %s", path, err)


def _prepare_and_build(model: Path, output: Path, target: str, req: BuildSettings, plan: BuildPlan,
                       outcome: BuildOutcome, stages: _Stages, precisioned: Precisioned, reference: Reference, profiles: tuple[Profile, ...],
                       progress: Any, onnx_sha: str, rewritten: RewriteResult,
                       shapes0: dict[str, tuple[int, ...]], samples: SampleSet | None) -> BuildOutcome:
    """From the prepared ONNX on: save, recheck, profile corners, TensorRT build, verify, manifest."""
    prepared = outcome.prepared
    saved = stages.run("save", lambda: _save(precisioned.model, prepared))
    outcome.written = True
    stages.run("recheck", lambda: _recheck(saved, target, shapes0))
    keep = not req.prepare_only and not req.no_verify  # verify reuses the reference's outputs
    corners = stages.run("profiles", lambda: _corners(reference, profiles, req, samples, keep))
    if req.prepare_only:
        outcome.stopped = "prepare-only"
        return outcome
    flavour = for_target(target)
    try:
        tensorrt_version(flavour)
    except BackendUnavailableError as exc:
        outcome.stopped = "tensorrt-unavailable"
        raise _no_tensorrt(exc, prepared, req.keep_prepared) from None
    built = stages.run("build", lambda: _build_engine(plan, progress))
    outcome.engine = output
    verify_json: dict[str, Any] | None = None
    if not req.no_verify and not flavour.inspects_engine:
        reason = (f"{flavour.name} engines run only on RTX-class GPUs of the compute capabilities they were "
                  "built for (kernels are compiled there at first run); run `trtconv verify` on such a GPU")
        verify_json = dict(stages.run("verify", lambda: Step({"passed": None, "reason": reason},
                                                             {"reason": reason}, "skipped")))
    elif not req.no_verify:
        verify_json = dict(stages.run("verify", lambda: _verify(model, req, plan, reference, corners)))
    plugin_details = plugin_fingerprints(plan.plugin_libraries, built.extra.get("plugin_creators") or {})
    material = request_identity(model, req, target, plan, onnx_sha256=onnx_sha, plugins=plugin_details)
    layer_source = "engine" if flavour.inspects_engine else "network"
    manifest = build_manifest(
        plan,
        identity=identity(material),
        layers={"source": layer_source, "layers": list(built.extra.get("layers") or [])},
        bindings=list(built.extra.get("bindings") or []),
        plugin_details=plugin_details,
        onnx_sha256=onnx_sha,
        environment=dict(built.environment),
        source_onnx=model.name,
        rewrites=rewritten.report.to_json().get("rewrites", []),
        rewrite_drift=None if rewritten.report.drift is None else rewritten.report.drift.to_json(),
        dtype_changes=[c.to_json() for c in rewritten.report.dtype_changes],
        precision={**precisioned.summary, "achieved": dict(built.precision)},
        calibration=None if precisioned.calibration is None else dict(precisioned.calibration),
        plugins_needed=list(built.plugins_needed),
        build_seconds=built.seconds,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        engine_sha256=built.engine_sha256,
        verify=verify_json,
    )
    write_manifest(manifest_path(output), manifest, force=True)
    outcome.manifest = manifest
    if verify_json is not None and verify_json.get("passed") is False:
        raise AccuracyError(
            "the engine's outputs differ from ONNX Runtime beyond the thresholds: "
            + "; ".join(verify_json.get("failures", [])[:3]),
            hint=f"the engine and {manifest_path(output).name} were kept for inspection; "
            "`trtconv verify` shows per-output statistics",
        )
    return outcome


def _no_tensorrt(exc: BackendUnavailableError, prepared: Path, kept: bool) -> BackendUnavailableError:
    """Exit 9 after the CPU stages: where the prepared ONNX is (``--keep-prepared``), or how to keep it."""
    trtexec = ("trtexec --stronglyTyped (TensorRT 10; 11 is always strongly typed): the precision is already "
               "explicit, no --fp16/--int8 flags needed")
    if kept:
        return BackendUnavailableError(
            f"{exc.message}; stopped after the precision stage: the prepared ONNX is {prepared}",
            hint=f"{(exc.hint or '').rstrip('.')}. Then run this command again, or build {prepared} with {trtexec}")
    return BackendUnavailableError(
        f"{exc.message}; stopped after the precision stage (nothing was kept)",
        hint=f"{(exc.hint or '').rstrip('.')}. Then run this command again; or add --prepare-only (or "
        f"--keep-prepared) to keep the prepared ONNX and build it with {trtexec}")


def _command(model: Path, output: Path, req: BuildSettings, target: str) -> str:
    """The command line a hint repeats when the caller gave none (the CLI gives the user's own): the
    paths and the settings that change what is built, by their declared names."""
    flags = f" --precision {req.precision}" if req.precision != "fp32" else ""
    flags += f" --trt {target}"  # always: the default target depends on what is installed
    flags += f" --calib-data {shlex.quote(str(req.calib_data))}" if req.calib_data else ""
    return (f"trtconv build {shlex.quote(str(model))} -o {shlex.quote(str(output))}{flags}"
            + (" --prepare-only" if req.prepare_only else ""))


def _refuse_requantizing(loaded: LoadedModel, precision: str) -> None:
    """INT8 over a model that already holds Q/DQ would quantize it twice."""
    if precision != "int8":
        return
    qdq = sum(1 for g in iter_graphs(loaded.proto.graph) for n in g.node if n.op_type in QDQ_OPS)
    if qdq:
        raise UsageError(
            f"{loaded.path.name} already holds {qdq} QuantizeLinear/DequantizeLinear node(s): it is quantized, "
            "and --precision int8 would add a second set of Q/DQ around them",
            hint="build it as it is with --precision fp32: TensorRT runs explicit Q/DQ in INT8 either way",
        )


def _has_samples(settings: QuantizeSettings) -> bool:
    return bool(settings.calib_data or settings.calib_loader or settings.random_data)


def _sample_shapes(samples: SampleSet) -> Iterator[dict[str, tuple[int, ...]]]:
    """Each sample's input shapes, read only if a default profile needs them."""
    return ({name: tuple(int(d) for d in array.shape) for name, array in sample.items()} for sample in samples)


def _ort_runnable(model: onnx.ModelProto) -> bool:
    try:
        ort.session(model)
    except InvalidModelError:
        return False
    return True


# --------------------------------------------------------------------------- stages


def _check(loaded: LoadedModel, target: str, shapes: dict[str, tuple[int, ...]]) -> Step[None]:
    report = analyze(loaded, target, shapes)
    if report.verdict not in ("supported", "needs-rewrite"):
        bad = [n for n in report.nodes if n.status == "unsupported"]
        names = ", ".join(f"{n.path} ({n.op_type})" for n in bad[:5]) or "see `trtconv check`"
        verb = "cannot build" if report.stage() == "builder" else "cannot parse"
        raise UnsupportedModelError(
            f"{target_name(target)} {verb} {len(bad)} node(s) that trtconv can neither rewrite nor map to a "
            f"plugin: {names}",
            hint=f"run `trtconv check --trt {target} {shlex.quote(str(loaded.path))}` for the reasons",
        )
    return Step(None, {"verdict": report.verdict, "target": target})


def _rewrite(loaded: LoadedModel, settings: RewriteSettings) -> Step[RewriteResult]:
    result = rewrite(loaded, settings)
    proof = result.report.graph_proof
    rules: dict[str, list[str]] = {}  # rule -> the nodes it rewrote
    for entry in result.report.rewrites:
        rules.setdefault(entry.rule, []).append(entry.node)
    return Step(result, {"rewritten": len(result.report.rewrites), "rules": rules,
                         "nodes": [result.report.nodes_before, result.report.nodes_after],
                         "graph_proof": {"method": proof.method, "passed": proof.passed,
                                         "tolerance": proof.tolerance, "arithmetic": proof.arithmetic}})


def _recheck(saved: Saved, target: str, shapes: dict[str, tuple[int, ...]]) -> Step[None]:
    """The prepared ONNX against the parser's rules again: what rewrite left behind fails here,
    without TensorRT, instead of minutes later in its parser. Plugin nodes are expected."""

    report = analyze(saved.graph, target, shapes)
    left = [n for n in report.nodes if n.status in ("unsupported", "rewritable")]
    if left:
        names = ", ".join(f"{n.path} ({n.op_type}: {n.status})" for n in left[:5])
        raise UnsupportedModelError(
            f"after rewrite and precision, {target_name(target)} would still reject {len(left)} node(s): {names}",
            hint=f"run `trtconv check --trt {target} {shlex.quote(str(saved.path))}` for the reasons",
        )
    plugins = sorted({qualified_op(n.domain, n.op_type) for n in report.nodes if n.status == "plugin"})
    return Step(None, {"verdict": report.verdict, "plugin_ops": plugins})


def _precision(model: onnx.ModelProto, req: BuildSettings, target: str, samples: SampleSet | None,
               reference: Reference, phases: _Phases | None) -> Step[Precisioned]:
    if req.precision == "fp32":
        return Step(Precisioned(model, {"method": "none"}), {"precision": "fp32"}, status="skipped")
    qs = req.quantize_settings()
    check_gate_outputs(model, qs.gate())
    if req.precision == "fp16":
        if samples is not None and not reference.rewritten_runs:
            log.warning("the rewritten graph holds plugin nodes ONNX Runtime cannot run: FP16 activation "
                        "ranges are not measured (rewrite with --dcn-target deformconv to measure them)")
            samples = None
        elif samples is None:
            log.warning("fp16 without --calib-data: nodes are kept in FP32 by op type and weight range only; "
                        "activation ranges are not measured (pass --calib-data DIR for that)")
        source = samples.source if samples is not None else None
        try:
            fp16 = convert_fp16(model, fp16_settings(qs), samples, progress=phases)  # quantize's settings
        except Fp16AccuracyError as exc:
            failed = QuantizeResult(exc.result.model, qs, exc.result.report, source, exc.result.report.samples)
            raise QuantizeAccuracyError(exc.message, failed, exc.hint) from exc
        report = fp16.report.to_json()
        gate = QuantizeResult(fp16.model, qs, fp16.report, source, fp16.report.samples)
        calibration = None if samples is None else {
            "method": "fp16-activation-ranges", "data_sha256": samples.digest(), "samples": len(samples)}
        kept = report.get("kept") or []
        return Step(Precisioned(fp16.model, {"method": "fp16-explicit", "report": report}, calibration, gate),
                    {"precision": "fp16", "samples": len(samples) if samples is not None else 0,
                     "kept_fp32": len(kept) if isinstance(kept, list) else kept, **_gate_json(gate)})

    assert samples is not None
    # Plugin nodes (DCN -> a TensorRT plugin) cannot run in ONNX Runtime: calibrate on the model's
    # DeformConv form instead, whose tensors carry the same names; int8 carries the scales over.
    calibration_model = None if reference.rewritten_runs else reference.deformconv
    # the calibration cache's header names a TensorRT version; TensorRT-RTX reads none, so it gets the default
    result = run_int8(model, samples, qs, calibration_model=calibration_model,
                      trt_version=target if target[:1].isdigit() else NEWEST_TENSORRT,
                      progress=phases, warn=log.warning)
    report8 = result.report
    gate = QuantizeResult(result.model, qs, report8, samples.source, report8.calibration_runs or None)
    calibration = {"method": qs.calib_method, "data_sha256": samples.digest(), "samples": report8.calibration_runs,
                   "held_out": report8.accuracy_samples if report8.checked_on == "held-out" else 0}
    return Step(Precisioned(result.model, {"method": "int8-qdq", "report": report8.to_json()}, calibration, gate),
                {"precision": "int8", "qdq_pairs": len(report8.placed), "remainder": report8.remainder,
                 "auto_excluded": list(report8.auto_excluded),
                 "calibrated_on": "model" if calibration_model is None else "DeformConv form", **_gate_json(gate)})


def _gate_json(result: QuantizeResult) -> dict[str, Any]:
    """The accuracy gate's verdict for the precision stage's record (same fields as ``quantize --json``)."""
    doc = result.to_json()
    keys = ("accuracy", "thresholds", "violations", "accuracy_check", "checked", "passed", "held_out_samples",
            "worst_samples", "weak", "verdict")
    return {"gate": {k: doc[k] for k in keys if k in doc}}


def _save(model: onnx.ModelProto, prepared: Path) -> Step[Saved]:
    save_model(model, prepared, force=True)
    # Hash the files, not the proto: a model over 2 GB cannot be serialized in memory.
    graph = load_model(prepared, structure_only=True)  # the files' hash, and the graph recheck reads
    sha = model_sha256(graph)
    return Step(Saved(prepared, sha, graph), {"path": str(prepared), "sha256": sha})


def _corners(reference: Reference, profiles: tuple[Profile, ...], req: BuildSettings, samples: SampleSet | None,
             keep_outputs: bool) -> Step[CornerRuns | None]:
    """Every profile corner run on the reference graph before TensorRT spends minutes on it (on a
    real sample of the corner's shapes where --calib-data has one); the outputs are kept for
    verify, which judges the engine on the same inputs."""
    if req.no_preflight:
        return Step(None, {"reason": "--no-preflight"}, "skipped")
    if not profiles and dynamic_inputs(reference.loaded.proto):  # only with --prepare-only: build needs one
        return Step(None, {"reason": "no profile: dynamic inputs and no shapes (--prepare-only)"}, "skipped")
    graph = reference.graph
    if graph is None:
        log.warning("profile shapes not checked on ONNX Runtime: it can run neither the model nor its rewritten "
                    "graph")
        return Step(None, {"reason": "ONNX Runtime cannot run this graph"}, "skipped")
    runs = run_corners(graph.model, profiles, seed=req.seed, path=graph.path, keep_outputs=keep_outputs,
                       samples=samples)
    if runs.failures:
        first = runs.failures[0]
        raise UsageError(
            f"the graph cannot run at {first.describe()}",
            hint="TensorRT would fail on the same shapes minutes into the build; narrow the profile "
            "(--min-shapes/--opt-shapes/--max-shapes) to shapes the model supports, or skip this check "
            "with --no-preflight",
        )
    return Step(runs, {"profiles": len(profiles), "corners_run": "min/opt/max", "graph": graph.label,
                       "not_run": list(runs.skipped),
                       "failed_on_synthetic_values": [f.describe() for f in runs.value_failures]})


def _build_engine(plan: BuildPlan, progress: Any) -> Step[Built]:
    flavour = for_target(plan.target)
    env = probe()
    gpu = env.gpus[0] if env.gpus else None
    cache = None
    if flavour.needs_gpu_to_build and gpu is None:
        raise BackendUnavailableError(f"no usable GPU: {env.driver_error or 'none visible'}",
                                      hint="run `trtconv doctor`; without a GPU, --trt rtx builds TensorRT-RTX engines")
    if flavour.timing_cache and gpu is not None:  # TensorRT-RTX: no timing cache, never touched
        cache = plan.timing_cache.resolve(gpu.name, gpu.compute_capability, env.tensorrt.version or "unknown")
    result = build_engine(plan, timing_cache=cache, progress=progress)
    share = result.precision_share
    built = Built(
        environment={**env.manifest_fields(flavour=flavour), "gpu_properties": gpu_properties()},
        precision={**result.precision.to_json(), "share": round(share, 4) if share is not None else None,
                   "checked_on": result.precision_source},
        plugins_needed=tuple(result.plugins_needed),
        seconds=result.seconds,
        engine_sha256=hashlib.sha256(plan.engine_path.read_bytes()).hexdigest(),
        extra=result.extra,
    )
    return Step(built, {"engine": str(plan.engine_path), "bytes": result.engine_bytes,
                        "timing_cache": str(cache) if cache else None})


def _verify(model: Path, req: BuildSettings, plan: BuildPlan, reference: Reference,
            corners: CornerRuns | None) -> Step[Mapping[str, Any]]:
    """Engine vs ONNX Runtime at every profile's min/opt/max, against the reference graph (the
    user's model, or what ONNX Runtime runs of it), on the inputs the profile stage ran; if
    ONNX Runtime runs none of them, skipped."""

    todo: list[tuple[int, str, dict[str, tuple[int, ...]]]] = []
    seen: set[tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]] = set()
    for index, profile in enumerate(plan.profiles or ()):
        for corner in CORNERS:
            shapes = profile.corner(corner)
            key = (index, tuple(sorted(shapes.items())))
            if key not in seen:
                seen.add(key)
                todo.append((index, corner, shapes))
    todo = todo or [(0, "static", {})]
    graph = reference.graph
    if graph is None:
        reason = "ONNX Runtime can run neither the model nor the prepared graph"
        return Step({"passed": None, "reason": reason}, {"reason": reason}, "skipped")
    result = verify_engine_corners(plan.engine_path, graph.path or graph.model, todo,
                                   thresholds=DEFAULT_THRESHOLDS[req.precision],
                                   plugin_libraries=plan.plugin_libraries, seed=req.seed,
                                   check_compatibility=False,  # just built here; an old manifest may linger
                                   references=corners.outputs if corners is not None else None)
    label = model.name if graph.label == "original" else f"{model.name} ({graph.label})"
    verdict = {**result, "reference": label}
    return Step(verdict, verdict, "done" if result["passed"] else "failed")
