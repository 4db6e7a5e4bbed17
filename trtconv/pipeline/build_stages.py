"""The stages of ``trtconv build``, one function each: plain data in, a frozen :class:`Step` out (its
result for the stages after it, and its line in the report). TensorRT is imported only inside
:func:`engine_stage` (by trtconv.trt). The precision stage's gate is ``trtconv.pipeline.quantize``'s,
not a copy."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from trtconv.analyze import NodeReport, analyze
from trtconv.errors import (
    BackendUnavailableError,
    TrtconvError,
    UnsupportedModelError,
    UsageError,
)
from trtconv.load import LoadedModel, dynamic_inputs, files_sha256, load_model, model_sha256, save_model
from trtconv.onnxutil import qualified_op
from trtconv.outputs import copy_file
from trtconv.pipeline.build_identity import gpu_properties
from trtconv.pipeline.build_parser import (
    Disagreement,
    accepted,
    aside_reasons,
    ask,
    disagreements,
    early_refusal,
    predicted,
    real_parser,
    refusal,
    unpredicted_rejections,
)
from trtconv.pipeline.build_record import ProgressPhases, Step
from trtconv.pipeline.build_settings import BuildSettings
from trtconv.pipeline.quantize import (
    INT8_GATE_KEYS,
    QuantizeAccuracyError,
    QuantizeResult,
    check_gate_outputs,
    fp16_settings,
    run_int8,
)
from trtconv.pipeline.reference_graph import Reference
from trtconv.plan import (
    CORNERS,
    BuildPlan,
    CornerRuns,
    Profile,
    run_corners,
    target_name,
)
from trtconv.precision import Fp16AccuracyError, convert_fp16
from trtconv.reference import DEFAULT_THRESHOLDS
from trtconv.rewrites import RewriteResult, RewriteSettings, SteppedAside, rewrite
from trtconv.samples import SampleSet
from trtconv.settings import NEWEST_TENSORRT
from trtconv.trt import build_engine, for_target, probe, target_module
from trtconv.verify import verify_engine_corners

log = logging.getLogger(__name__)


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
    copied: str | None = None  # the user's file copied as it is (nothing rewritten or converted): its bytes' SHA-256


@dataclass(frozen=True)
class Checked:
    fold: bool  # the rewrite must fold with the profile's shapes (``rewrite --shapes``)
    # nodes check refused that the target's installed parser decides on instead (at the recheck)
    advice: tuple[NodeReport, ...] = ()
    verdict: str = ""  # check's verdict ("supported": a copy of the model needs no recheck)


@dataclass(frozen=True)
class Built:
    environment: Mapping[str, Any]
    precision: Mapping[str, Any]
    plugins_needed: tuple[str, ...]
    seconds: float
    engine_sha256: str
    extra: Mapping[str, Any] = field(default_factory=dict)  # layer table, bindings, plugin creators



def check_stage(loaded: LoadedModel, target: str, shapes: dict[str, tuple[int, ...]], hint: str | None = None,
                settings: RewriteSettings | None = None, *, early: bool = False) -> Step[Checked]:
    """The model against the target's parser rules: nodes nothing can fix stop the build here (exit 5);
    ``hint``: the error's hint where a build option fixes them (--split-tail). With ``settings`` (a
    static profile), a model it refuses is checked again as the rewrite leaves it when it folds with
    the profile's shapes, and that check decides (an LSTM in an If whose shape-only condition folds
    away builds). Where the target's parser is installed, a refusal is advice (``Checked.advice``) and
    the real parser decides at the recheck, on the prepared ONNX (folding may give a node what the parser needs);
    with ``early`` (the build cannot go on anyway: no shapes for a dynamic model) it refuses here a
    node the real parser rejects in the model file as given. The result: whether the rewrite stage
    must fold with the shapes (``rewrite --shapes``)."""
    report = analyze(loaded, target, shapes)
    if report.verdict not in ("supported", "needs-rewrite") and settings is not None:
        folded = folded_verdict(loaded, target, shapes, settings)
        if folded in ("supported", "needs-rewrite"):
            return Step(Checked(True, verdict=folded), {"verdict": folded, "target": target,
                               "folded": "unsupported as it is; decided on the graph folded with the shapes"})
    if report.verdict not in ("supported", "needs-rewrite"):
        bad = [n for n in report.nodes if n.status == "unsupported"]
        names = ", ".join(f"{n.path} ({n.op_type})" for n in bad[:5]) or "see `trtconv check`"
        module = real_parser(target, bad)
        refused = early_refusal(loaded.path, module, target, bad) if module is not None and early else None
        if refused is not None:
            raise UnsupportedModelError(refused, hint=hint or f"run `trtconv check --trt {target} "
                                                           f"{shlex.quote(str(loaded.path))}` for the reasons")
        if module is not None:  # advice: the real parser decides on the prepared ONNX (recheck)
            return Step(Checked(False, tuple(bad), report.verdict), {"verdict": report.verdict, "target": target, "decided_by": module,
                                "advice": f"check predicts {target_name(target)} refuses {len(bad)} node(s): {names}; "
                                          f"{module}'s own parser decides on the prepared ONNX"})
        verb = "cannot build" if report.stage() == "builder" else "cannot parse"
        raise UnsupportedModelError(
            f"{target_name(target)} {verb} {len(bad)} node(s) that trtconv can neither rewrite nor map to a "
            f"plugin: {names}",
            hint=hint or f"run `trtconv check --trt {target} {shlex.quote(str(loaded.path))}` for the reasons",
        )
    return Step(Checked(False, verdict=report.verdict), {"verdict": report.verdict, "target": target})


def folded_verdict(loaded: LoadedModel, target: str, shapes: dict[str, tuple[int, ...]],
                    settings: RewriteSettings) -> str | None:
    """``check``'s verdict on the graph the rewrite leaves when it folds with ``shapes``; None when
    that rewrite fails (the model as it is keeps its verdict and its reasons)."""
    try:
        folded = rewrite(loaded, replace(settings, shapes=dict(shapes), verify=False)).model
    except TrtconvError as exc:
        log.debug("folding with the profile's shapes failed: %s", exc)
        return None
    return analyze(LoadedModel(folded, loaded.path, weights_loaded=True), target, shapes).verdict


def rewrite_stage(loaded: LoadedModel, settings: RewriteSettings) -> Step[RewriteResult]:
    """The rewrite with ``step_aside`` on: a rewrite whose proof fails is dropped (said here and in the
    report), and the parser decides on the node as it was."""
    result = rewrite(loaded, replace(settings, step_aside=True))
    for a in result.report.stepped_aside:
        log.warning("%s; the node stays as it was", a.describe())
    proof = result.report.graph_proof
    rules: dict[str, list[str]] = {}  # rule -> the nodes it rewrote
    for entry in result.report.rewrites:
        rules.setdefault(entry.rule, []).append(entry.node)
    proven = sum(1 for e in result.report.rewrites if e.proof.passed and e.proof.method != "none")
    return Step(result, {"rewritten": len(result.report.rewrites), "rules": rules, "node_proofs_passed": proven,
                         "stepped_aside": [a.to_json() for a in result.report.stepped_aside],
                         "nodes": [result.report.nodes_before, result.report.nodes_after],
                         "graph_proof": {"method": proof.method, "passed": proof.passed, "reason": proof.reason,
                                         "tolerance": proof.tolerance, "arithmetic": proof.arithmetic,
                                         "scope": dict(proof.scope) or None}})


def recheck_stage(saved: Saved, target: str, shapes: dict[str, tuple[int, ...]],
                  skipped: frozenset[str] = frozenset(), hint: str | None = None,
                  aside: tuple[SteppedAside, ...] = (), advice: tuple[NodeReport, ...] = (),
                  profile: Profile | None = None, verdict: str | None = None) -> Step[tuple[Disagreement, ...]]:
    """The prepared ONNX against the parser's rules again: what rewrite left behind fails here,
    without TensorRT, instead of minutes later in its parser (or, for an op the parser imports as
    another op, never). Plugin nodes are expected. ``skipped``: the rules ``--skip-rule`` turned off;
    ``aside``: the rewrites that stepped aside (their nodes stayed as they were). Where the target's
    parser is installed, it decides what the rules refuse here or refused at the check stage
    (``advice``), building with the first ``profile`` (build_parser.py): the result is the nodes it
    took against the prediction. A copy of the model (nothing rewritten or converted) that check
    called supported (``verdict``) is what it just checked: skipped."""
    if saved.copied and verdict == "supported" and not advice:
        return Step((), {"reason": "the prepared ONNX is the model check checked, unchanged"}, "skipped")

    report = analyze(saved.graph, target, shapes)
    left = [n for n in report.nodes if n.status in ("unsupported", "rewritable")]
    plugins = sorted({qualified_op(n.domain, n.op_type) for n in report.nodes if n.status == "plugin"})
    asked = left + [n for n in advice if n.path not in {m.path for m in left}]
    if not asked:
        return Step((), {"verdict": report.verdict, "plugin_ops": plugins})
    reasons = aside_reasons(aside)
    check_hint = f"run `trtconv check --trt {target} {shlex.quote(str(saved.path))}` for the reasons"
    off = sorted({n.rewrite for n in left if n.rewrite in skipped})
    hint = f"drop --skip-rule {' '.join(off)}; or {hint or check_hint}" if off else hint or check_hint
    module = real_parser(target, asked)
    if module is not None:
        log.info("check predicts %s refuses %d node(s): asking %s", target_name(target), len(asked), module)
        real = ask(saved.path, module, profile.to_json() if profile else shapes,
                   profile.values_json() if profile else None)
        if not accepted(real):
            raise UnsupportedModelError(refusal(target, real, asked, reasons), hint=hint)
        found = disagreements(asked, real)
        for d in found:
            log.warning("check predicted %s refuses %s (%s), but %s: recorded as a disagreement (parser_disagreements)",
                        target_name(target), d.node, d.op, d.real)
        return Step(found, {"verdict": report.verdict, "plugin_ops": plugins, "decided_by": module,
                            "parser_disagreements": [d.to_json() for d in found]})
    names = ", ".join(f"{n.path} ({n.op_type}: " + (f"{predicted(n)}; {reasons[n.path]}" if n.path in reasons else
                                                     n.status + (f" by {n.rewrite}, turned off by --skip-rule"
                                                                 if n.rewrite in skipped else "")) + ")"
                      for n in left[:5])
    raise UnsupportedModelError(
        f"after rewrite and precision, {target_name(target)} would still reject {len(left)} node(s): {names}",
        hint=hint)


def missed_rejections(saved: Saved, target: str, shapes: dict[str, tuple[int, ...]]) -> tuple[Disagreement, ...]:
    """After the build stage failed: the nodes the target's installed parser rejects that ``check``
    said it would take (none where the target is not installed), for ``parser_disagreements``."""
    module = target_module(target)
    if module is None:
        return ()
    try:
        return unpredicted_rejections(analyze(saved.graph, target, shapes).nodes, saved.path, module)
    except TrtconvError as exc:  # the build's own error is what the user must see
        log.debug("no parser disagreements recorded: %s", exc)
        return ()


def precision_stage(model: onnx.ModelProto, req: BuildSettings, target: str, samples: SampleSet | None,
               reference: Reference, phases: ProgressPhases | None) -> Step[Precisioned]:
    if req.precision == "fp32":
        return Step(Precisioned(model, {"method": "none"}),
                    {"precision": "fp32", "reason": "--precision fp32: the graph keeps its own types"}, status="skipped")
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
            raise QuantizeAccuracyError.of(exc, failed) from exc
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
                   "held_out": report8.accuracy_samples if report8.checked_on == "held-out" else 0,
                   "unverified": report8.unverified, "verdict": report8.verdict}
    return Step(Precisioned(result.model, {"method": "int8-qdq", "report": report8.to_json()}, calibration, gate),
                {"precision": "int8", "qdq_pairs": len(report8.placed), "remainder": report8.remainder,
                 "auto_excluded": list(report8.auto_excluded),
                 "calibrated_on": "model" if calibration_model is None else "DeformConv form", **_gate_json(gate)})


def _gate_json(result: QuantizeResult) -> dict[str, Any]:
    """The accuracy gate's verdict for the precision stage's record (same fields as ``quantize --json``)."""
    doc = result.to_json()
    keys = ("accuracy", "thresholds", "violations", "accuracy_check", "checked", "passed", *INT8_GATE_KEYS)
    return {"gate": {k: doc[k] for k in keys if k in doc}}


def save_stage(model: onnx.ModelProto, prepared: Path, source: LoadedModel | None = None) -> Step[Saved]:
    """The prepared ONNX. ``source``: the model as loaded; when ``model`` is it (nothing was rewritten
    or converted) and it is one file, that file is copied byte for byte (hashed on the way) instead of
    serialized again and read back."""
    if source is not None and source.proto is model and not source.external_files:
        digest = copy_file(source.path, prepared, force=True)
        sha = files_sha256([(prepared.name, digest)])
        copied = LoadedModel(source.proto, prepared, source.weights_loaded, checker_error=source.checker_error)
        return Step(Saved(prepared, sha, copied, copied=digest), {"path": str(prepared), "sha256": sha,
                                                                "written": "the model's file, copied as it is"})
    save_model(model, prepared, force=True)
    # Hash the files, not the proto: a model over 2 GB cannot be serialized in memory.
    graph = load_model(prepared, structure_only=True)  # the files' hash, and the graph recheck reads
    sha = model_sha256(graph)
    return Step(Saved(prepared, sha, graph), {"path": str(prepared), "sha256": sha})


def corners_stage(reference: Reference, profiles: tuple[Profile, ...], req: BuildSettings, samples: SampleSet | None,
                  keep_outputs: bool, builder_follows: bool = False) -> Step[CornerRuns | None]:
    """The pre-flight: every profile corner run on the reference graph, one inference per corner on one
    ONNX Runtime session (on a real sample of the corner's shapes where --calib-data has one), where
    what it finds is not found anyway: its outputs are kept for verify (``keep_outputs``), which judges
    the engine on the same inputs; or no builder follows (--prepare-only). Before a build whose engine
    is not verified here, it runs nothing: the builder checks every corner's shapes itself
    (``builder_follows``: a corner the graph cannot take is exit 2, trtconv.trt.builder.profile_error)."""
    if req.no_preflight:
        return Step(None, {"reason": "--no-preflight"}, "skipped")
    if builder_follows and not keep_outputs:
        return Step(None, {"reason": "the builder checks every profile corner's shapes itself, and nothing here "
                                     "uses the outputs of running them (no verify)"}, "skipped")
    if not profiles and dynamic_inputs(reference.loaded.proto):  # only with --prepare-only: build needs one
        return Step(None, {"reason": "no profile: dynamic inputs and no shapes (--prepare-only)"}, "skipped")
    graph = reference.graph
    if graph is None:
        log.warning("profile shapes not checked on ONNX Runtime: it can run neither the model nor its rewritten "
                    "graph")
        return Step(None, {"reason": "ONNX Runtime cannot run this graph"}, "skipped")
    runs = run_corners(graph.model, profiles, seed=req.seed, path=graph.path, keep_outputs=keep_outputs,
                       samples=samples, session=graph.session)
    reference.release_session()
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


def engine_stage(plan: BuildPlan, progress: Any, new_caches: list[Path] | None = None) -> Step[Built]:
    """The TensorRT build. ``new_caches``: the timing cache is added to it when it does not exist yet
    (this build creates it, so a failed build removes it)."""
    flavour = for_target(plan.target)
    env = probe()
    gpu = env.gpus[0] if env.gpus else None
    cache = None
    if flavour.needs_gpu_to_build and gpu is None:
        raise BackendUnavailableError(f"no usable GPU: {env.driver_error or 'none visible'}",
                                      hint="run `trtconv doctor`; without a GPU, --trt rtx builds TensorRT-RTX engines")
    if flavour.timing_cache and gpu is not None:  # TensorRT-RTX: no timing cache, never touched
        cache = plan.timing_cache.resolve(gpu.name, gpu.compute_capability, env.tensorrt.version or "unknown")
        if cache is not None and new_caches is not None and not cache.exists():
            new_caches.append(cache)
    result = build_engine(plan, timing_cache=cache, progress=progress)
    share = result.precision_share
    built = Built(
        environment={**env.manifest_fields(flavour=flavour), "gpu_properties": gpu_properties()},
        precision={**result.precision.to_json(), "share": round(share, 4) if share is not None else None,
                   "checked_on": result.precision_source},
        plugins_needed=tuple(result.plugins_needed),
        seconds=result.seconds,
        engine_sha256=result.engine_sha256,
        extra=result.extra,
    )
    return Step(built, {"engine": str(plan.engine_path), "bytes": result.engine_bytes,
                        "timing_cache": str(cache) if cache else None})


def verify_stage(model: Path, req: BuildSettings, plan: BuildPlan, reference: Reference,
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
