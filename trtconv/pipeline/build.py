"""``trtconv build``: check → rewrite → precision → [TensorRT build] → verify, as one pipeline.

Every stage before the TensorRT build runs on the CPU, so the pipeline is useful
without TensorRT: it stops after writing the prepared ONNX (the explicit-precision,
rewritten graph TensorRT will parse) with TENSORRT_UNAVAILABLE, or on purpose with
``prepare_only``. Stage results are collected as plain data for the manifest and
``--json``. TensorRT is imported only inside ``_tensorrt_build``.

Over 400 lines because it is one small function per stage plus the run that orders them;
the precision stage's gate is ``trtconv.pipeline.quantize``'s, not a copy.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
from trtconv.load import LoadedModel, load_model, model_sha256, save_model
from trtconv.onnxutil.domains import qualified_op
from trtconv.onnxutil.walk import iter_graphs
from trtconv.outputs import atomic_dir, check_output_path
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
from trtconv.plan.corners import CORNERS, check_corners_or_skip
from trtconv.plan.manifest import build_manifest, manifest_path, write_manifest
from trtconv.plan.plan import BuildPlan, Precision, target_name, validate_plan
from trtconv.plan.profiles import build_profiles
from trtconv.precision.fp16 import Fp16AccuracyError, convert_fp16
from trtconv.precision.int8 import DEFAULT_TRT_VERSION
from trtconv.reference import ort
from trtconv.reference.compare import DEFAULT_THRESHOLDS
from trtconv.rewrites import DCN_TARGETS, RewriteSettings, rewrite, trtconv_plugin_spec
from trtconv.rewrites.catalog import rewrite_rule_for
from trtconv.trt.builder import build_engine
from trtconv.trt.environment import probe
from trtconv.trt.flavour import for_target
from trtconv.trt.loader import tensorrt_version
from trtconv.verify.engine import verify_engine_corners

log = logging.getLogger(__name__)
StageFn = Callable[[str, str], None]  # (stage, message): progress lines for the CLI


PLUGIN_FREE_DCN = "portable"  # rewrites.dcn's target of standard ONNX ops only (no plugin, no DeformConv)


@dataclass(frozen=True)
class BuildRequest:
    """Everything ``trtconv build`` was asked, before anything is read."""

    model: Path
    output: Path
    precision: Precision = "fp32"
    calib_data: Path | None = None
    calib_limit: int = 0
    shapes: str | None = None
    min_shapes: tuple[str, ...] = ()
    opt_shapes: tuple[str, ...] = ()
    max_shapes: tuple[str, ...] = ()
    prepared: Path | None = None  # default: <output stem>.prepared.onnx
    prepare_only: bool = False
    verify: bool = True
    target: str = "11.4"  # TensorRT version the check stage judges against, or "rtx" (TensorRT-RTX)
    dcn_target: str | None = None  # rewrite's DCN target (None: default_dcn_target(target))
    seed: int = 0
    plan: BuildPlan | None = None  # limits, cache, compatibility, plugins (onnx/engine paths filled in)
    # fp16/int8: samples, exclusions, INT8 options and the accuracy gate, as ``quantize`` takes them
    # (None: quantize's defaults with calib_data / calib_limit)
    quantize: QuantizeSettings | None = None

    def quantize_settings(self) -> QuantizeSettings:
        """The precision stage's settings (precision fp16 or int8)."""
        base = self.quantize or QuantizeSettings(calib_data=self.calib_data, max_samples=self.calib_limit)
        return replace(base, precision="int8" if self.precision == "int8" else "fp16")

    def dcn(self) -> str | None:
        """The DCN rewrite target: the user's, else the plugin-free form where the target TensorRT
        has no plugins (RTX), else None (rewrite's own default)."""
        if self.dcn_target is not None:
            return self.dcn_target
        return PLUGIN_FREE_DCN if not for_target(self.target).plugins and PLUGIN_FREE_DCN in DCN_TARGETS else None

    def prepared_path(self) -> Path:
        if self.prepared is not None:
            return self.prepared
        name = self.output.name[: -len(".engine")] if self.output.name.endswith(".engine") else self.output.name
        return self.output.with_name(name + ".prepared.onnx")


@dataclass
class StageRecord:
    name: str
    status: str  # "done" | "skipped" | "failed"
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3), **self.detail}


@dataclass
class BuildOutcome:
    prepared: Path
    engine: Path | None = None
    manifest: dict[str, Any] | None = None
    stages: list[StageRecord] = field(default_factory=list)
    stopped: str | None = None  # why the pipeline stopped before an engine, if it did
    gate: QuantizeResult | None = None  # fp16/int8: the precision stage's accuracy gate (also when it failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "prepared_onnx": str(self.prepared),
            "engine": str(self.engine) if self.engine else None,
            "manifest": str(manifest_path(self.engine)) if self.engine else None,
            "stopped": self.stopped,
            "stages": [s.to_json() for s in self.stages],
        }


class _Stages:
    def __init__(self, outcome: BuildOutcome, say: StageFn | None) -> None:
        self.outcome = outcome
        self.say = say or (lambda stage, msg: None)

    def run(self, name: str, fn: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        self.say(name, "running")
        start = time.monotonic()
        rec = StageRecord(name, "failed")
        self.outcome.stages.append(rec)
        detail = fn() or {}
        rec.status = str(detail.pop("_status", "done"))
        rec.seconds = time.monotonic() - start
        rec.detail = detail
        self.say(name, rec.status)
        return detail


def run_build(req: BuildRequest, *, say: StageFn | None = None, progress: Any = None,
              outcome: BuildOutcome | None = None) -> BuildOutcome:
    """The whole pipeline. Raises a TrtconvError subclass on failure (its exit code is the verdict);
    pass ``outcome`` to see how far it got (stages, prepared ONNX) when it raises."""
    plan = req.plan or BuildPlan(onnx_path=req.prepared_path(), engine_path=req.output)
    if req.precision == "int8" and not _has_samples(req.quantize_settings()):
        raise UsageError("--precision int8 needs --calib-data", hint="give a folder of .npy/.npz samples or images")
    if req.precision != "fp32":
        check_quantize_settings(req.quantize_settings())
    prepared = req.prepared_path()
    # Every output is checked before minutes of work: the engine, its manifest, the prepared ONNX.
    if not req.prepare_only:
        check_output_path(req.output, force=plan.force)
        check_output_path(manifest_path(req.output), force=plan.force)
    # The prepared ONNX is derived data: its default path is rewritten freely; an explicit
    # --prepared path is treated like any output (exists → needs --force).
    check_output_path(prepared, force=plan.force or req.prepared is None)
    outcome = outcome if outcome is not None else BuildOutcome(prepared=prepared)
    outcome.prepared = prepared
    stages = _Stages(outcome, say)

    loaded = load_model(req.model)
    profiles = build_profiles(loaded.proto, shapes=req.shapes, min_shapes=req.min_shapes,
                              opt_shapes=req.opt_shapes, max_shapes=req.max_shapes)
    plan = replace(plan, onnx_path=prepared, engine_path=req.output, precision=req.precision, profiles=profiles)
    validate_plan(plan)
    onnx_sha = model_sha256(loaded)
    shapes0 = profiles[0].corner("opt") if profiles else {}

    stages.run("check", lambda: _check(loaded, req.target, shapes0))
    rewritten: dict[str, Any] = {}
    stages.run("rewrite", lambda: _rewrite(loaded, req, rewritten))
    model: onnx.ModelProto = rewritten["model"]
    precision_state: dict[str, Any] = {}
    try:
        stages.run("precision", lambda: _precision(model, req, loaded, precision_state))
    finally:
        outcome.gate = precision_state.get("gate")
    model = precision_state["model"]
    stages.run("save", lambda: _save(model, prepared))
    stages.run("recheck", lambda: _recheck(prepared, req.target, shapes0))
    stages.run("profiles", lambda: _corners(model, prepared, loaded, profiles))
    if req.prepare_only:
        outcome.stopped = "prepare-only"
        return outcome
    flavour = for_target(req.target)
    try:
        tensorrt_version(flavour)
    except BackendUnavailableError as exc:
        outcome.stopped = "tensorrt-unavailable"
        raise BackendUnavailableError(
            f"{exc.message}; stopped after the precision stage: the prepared ONNX is {prepared}",
            hint=f"{(exc.hint or '').rstrip('.')}. Then run this command again, or build {prepared} with "
            "trtexec (the precision is already explicit: no --fp16/--int8 flags needed)",
        ) from None
    build_state: dict[str, Any] = {}
    stages.run("build", lambda: _tensorrt_build(plan, progress, build_state))
    outcome.engine = req.output
    verify_json: dict[str, Any] | None = None
    if req.verify and not flavour.inspects_engine:
        verify_json = {"passed": None, **stages.run("verify", lambda: {
            "_status": "skipped",
            "reason": f"{flavour.name} engines run only on RTX-class GPUs of the compute capabilities they were "
                      "built for (kernels are compiled there at first run); run `trtconv verify` on such a GPU"})}
    elif req.verify:
        verify_json = stages.run("verify", lambda: _verify(req, plan))
        if outcome.stages[-1].status == "skipped":
            verify_json = {"passed": None, **verify_json}
    manifest = build_manifest(
        plan,
        onnx_sha256=onnx_sha,
        environment=build_state["environment"],
        source_onnx=req.model.name,
        rewrites=rewritten.get("report", {}).get("rewrites", []),
        precision={**precision_state.get("summary", {}), "achieved": build_state["precision"]},
        calibration=precision_state.get("calibration"),
        plugins_needed=build_state["plugins_needed"],
        build_seconds=build_state["seconds"],
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        engine_sha256=build_state["engine_sha256"],
        verify=verify_json,
    )
    write_manifest(manifest_path(req.output), manifest, force=True)
    outcome.manifest = manifest
    if verify_json is not None and verify_json.get("passed") is False:
        raise AccuracyError(
            "the engine's outputs differ from ONNX Runtime beyond the thresholds: "
            + "; ".join(verify_json.get("failures", [])[:3]),
            hint=f"the engine and {manifest_path(req.output).name} were kept for inspection; "
            "`trtconv verify` shows per-output statistics",
        )
    return outcome


# --------------------------------------------------------------------------- stages


def _check(loaded: LoadedModel, target: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:

    report = analyze(loaded, target, shapes)
    if report.verdict not in ("supported", "needs-rewrite"):
        bad = [n for n in report.nodes if n.status == "unsupported"]
        names = ", ".join(f"{n.path} ({n.op_type})" for n in bad[:5]) or "see `trtconv check`"
        verb = "cannot build" if report.stage() == "builder" else "cannot parse"
        raise UnsupportedModelError(
            f"{target_name(target)} {verb} {len(bad)} node(s) that trtconv can neither rewrite nor map to a "
            f"plugin: {names}",
            hint=f"run `trtconv check {loaded.path}` for the reasons",
        )
    return {"verdict": report.verdict, "target": target}


def _rewrite(loaded: LoadedModel, req: BuildRequest, out: dict[str, Any]) -> dict[str, Any]:

    settings = RewriteSettings(seed=req.seed)
    dcn_target = req.dcn()
    if dcn_target is not None:
        # trtconv's own DCNv2 plugin: the spec shipped inside the package
        spec = trtconv_plugin_spec() if dcn_target == "trtconv-plugin" else None
        settings = replace(settings, dcn_target=dcn_target, dcn_plugin=spec)
    result = rewrite(loaded, settings)
    out["model"] = result.model
    out["report"] = result.report.to_json()
    return {"rewritten": len(result.report.rewrites),
            "nodes": [result.report.nodes_before, result.report.nodes_after]}


def _recheck(prepared: Path, target: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The prepared ONNX against the parser's rules again: what rewrite left behind fails here,
    without TensorRT, instead of minutes later in its parser. Plugin nodes are expected."""

    report = analyze(load_model(prepared, structure_only=True), target, shapes)
    left = [n for n in report.nodes if n.status in ("unsupported", "rewritable")]
    if left:
        names = ", ".join(f"{n.path} ({n.op_type}: {n.status})" for n in left[:5])
        raise UnsupportedModelError(
            f"after rewrite and precision, {target_name(target)} would still reject {len(left)} node(s): {names}",
            hint=f"run `trtconv check {prepared}` for the reasons",
        )
    plugins = sorted({qualified_op(n.domain, n.op_type) for n in report.nodes if n.status == "plugin"})
    return {"verdict": report.verdict, "plugin_ops": plugins}


def _has_samples(settings: QuantizeSettings) -> bool:
    return bool(settings.calib_data or settings.calib_loader or settings.random_data)


def _ort_runnable(model: onnx.ModelProto) -> bool:

    try:
        ort.session(model)
    except InvalidModelError:
        return False
    return True


def _precision(model: onnx.ModelProto, req: BuildRequest, loaded: LoadedModel,
               out: dict[str, Any]) -> dict[str, Any]:
    if req.precision == "fp32":
        out["model"] = model
        out["summary"] = {"method": "none"}
        return {"precision": "fp32", "_status": "skipped"}
    qs = req.quantize_settings()
    check_gate_outputs(model, qs.gate())
    samples = sample_set(model, qs)
    if req.precision == "fp16":
        if samples is not None and not _ort_runnable(model):
            log.warning("the rewritten graph holds plugin nodes ONNX Runtime cannot run: FP16 activation "
                        "ranges are not measured (rewrite with --dcn-target deformconv to measure them)")
            samples = None
        elif samples is None:
            log.warning("fp16 without --calib-data: nodes are kept in FP32 by op type and weight range only; "
                        "activation ranges are not measured (pass --calib-data DIR for that)")
        try:
            fp16 = convert_fp16(model, fp16_settings(qs), samples)  # quantize's settings
        except Fp16AccuracyError as exc:
            failed = QuantizeResult(exc.result.model, qs, exc.result.report, samples.source if samples else None,
                                    exc.result.report.samples)
            out["gate"] = failed
            raise QuantizeAccuracyError(exc.message, failed, exc.hint) from exc
        out["model"] = fp16.model
        out["gate"] = QuantizeResult(fp16.model, qs, fp16.report, samples.source if samples else None,
                                     fp16.report.samples)
        out["summary"] = {"method": "fp16-explicit", "report": fp16.report.to_json()}
        if samples is not None:
            out["calibration"] = {"method": "fp16-activation-ranges", "data_sha256": samples.digest(),
                                  "samples": len(samples)}
        kept = fp16.report.to_json().get("kept") or []
        return {"precision": "fp16", "samples": len(samples) if samples is not None else 0,
                "kept_fp32": len(kept) if isinstance(kept, list) else kept, **_gate_json(out["gate"])}

    assert samples is not None
    # Plugin nodes (DCN -> a TensorRT plugin) cannot run in ONNX Runtime: calibrate on the model's
    # DeformConv form instead, whose tensors carry the same names; int8 carries the scales over.
    calibration_model = None if _ort_runnable(model) else _deformconv_form(loaded)
    try:
        # the calibration cache's header names a TensorRT version; TensorRT-RTX reads none, so it gets the default
        result = run_int8(model, samples, qs, calibration_model=calibration_model,
                          trt_version=req.target if req.target[:1].isdigit() else DEFAULT_TRT_VERSION,
                          warn=log.warning)
    except QuantizeAccuracyError as exc:
        out["gate"] = exc.result
        raise
    report = result.report
    out["model"] = result.model
    out["gate"] = QuantizeResult(result.model, qs, report, samples.source, report.calibration_runs or None)
    out["summary"] = {"method": "int8-qdq", "report": report.to_json()}
    out["calibration"] = {"method": qs.calib_method, "data_sha256": samples.digest(),
                          "samples": report.calibration_runs, "held_out": report.accuracy_samples
                          if report.checked_on == "held-out" else 0}
    return {"precision": "int8", "qdq_pairs": len(report.placed), "remainder": report.remainder,
            "auto_excluded": list(report.auto_excluded),
            "calibrated_on": "model" if calibration_model is None else "DeformConv form", **_gate_json(out["gate"])}


def _gate_json(result: QuantizeResult) -> dict[str, Any]:
    """The accuracy gate's verdict for the precision stage's record (same fields as ``quantize --json``)."""
    doc = result.to_json()
    return {"gate": {k: doc[k] for k in ("accuracy", "thresholds", "violations", "accuracy_check", "checked",
                                         "passed")}}


def _save(model: onnx.ModelProto, prepared: Path) -> dict[str, Any]:
    save_model(model, prepared, force=True)
    # Hash the files, not the proto: a model over 2 GB cannot be serialized in memory.
    return {"path": str(prepared), "sha256": model_sha256(load_model(prepared, load_weights=False, check=False))}


def _corners(model: onnx.ModelProto, prepared: Path, original: LoadedModel,
             profiles: tuple[Any, ...]) -> dict[str, Any]:
    skipped: list[str] = []
    failures = check_corners_or_skip(model, profiles, prepared, skipped)
    graph = "prepared"
    if failures is None:  # plugin nodes: ONNX Runtime cannot run the prepared graph; try the original
        failures, graph = check_corners_or_skip(original.proto, profiles, original.path, skipped), "original"
    if failures is None:  # custom DCN ops in the original too: their DeformConv form runs
        deform = _deformconv_form(original)
        if deform is not None:
            failures = check_corners_or_skip(deform, profiles, skipped=skipped)
            graph = "original with DCN as DeformConv"
    if failures is None:
        return {"_status": "skipped", "reason": "ONNX Runtime cannot run this graph"}
    if failures:
        first = failures[0]
        raise UsageError(
            f"the graph cannot run at {first.describe()}",
            hint="TensorRT would fail on the same shapes minutes into the build; narrow the profile "
            "(--min-shapes/--opt-shapes/--max-shapes) to shapes the model supports",
        )
    return {"profiles": len(profiles), "corners_run": "min/opt/max", "graph": graph,
            "not_run": skipped}


def _deformconv_form(loaded: LoadedModel) -> onnx.ModelProto | None:
    """The model with DCN nodes rewritten to ONNX DeformConv (ONNX Runtime runs it), or None."""

    if not any(rewrite_rule_for(n.domain, n.op_type) for g in iter_graphs(loaded.proto.graph) for n in g.node):
        return None  # no DCN op: nothing a DeformConv form would change
    try:
        return rewrite(loaded, RewriteSettings(dcn_target="deformconv", verify=False)).model
    except TrtconvError:
        return None


def _tensorrt_build(plan: BuildPlan, progress: Any, out: dict[str, Any]) -> dict[str, Any]:
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
    out["environment"] = env.manifest_fields(flavour=flavour)
    share = result.precision_share
    out["precision"] = {**result.precision.to_json(), "share": round(share, 4) if share is not None else None,
                        "checked_on": result.precision_source}
    out["plugins_needed"] = list(result.plugins_needed)
    out["seconds"] = result.seconds
    out["engine_sha256"] = hashlib.sha256(plan.engine_path.read_bytes()).hexdigest()
    return {"engine": str(plan.engine_path), "bytes": result.engine_bytes,
            "timing_cache": str(cache) if cache else None}


def _verify(req: BuildRequest, plan: BuildPlan) -> dict[str, Any]:
    """Engine vs ONNX Runtime at every profile's min/opt/max, on the user's model; if ORT cannot
    run it (custom DCN ops), on the prepared graph (rewrites are proven equal to the original);
    if neither runs, skipped."""

    corners: list[tuple[int, str, dict[str, tuple[int, ...]]]] = []
    seen: set[tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]] = set()
    for index, profile in enumerate(plan.profiles or ()):
        for corner in CORNERS:
            shapes = profile.corner(corner)
            key = (index, tuple(sorted(shapes.items())))
            if key not in seen:
                seen.add(key)
                corners.append((index, corner, shapes))
    corners = corners or [(0, "static", {})]

    def run(reference: Path, label: str) -> dict[str, Any]:
        result = verify_engine_corners(plan.engine_path, reference, corners,
                                       thresholds=DEFAULT_THRESHOLDS[req.precision],
                                       plugin_libraries=plan.plugin_libraries, seed=req.seed,
                                       check_compatibility=False)  # just built here; an old manifest may linger
        return {**result, "reference": label, "_status": "done" if result["passed"] else "failed"}

    for reference in (req.model, plan.onnx_path):
        try:
            ort.session(reference)
        except InvalidModelError:
            continue
        return run(reference, reference.name)
    # Plugin nodes on both sides (e.g. DCNv2 -> a TensorRT plugin): the reference is the model with
    # its DCN nodes rewritten to ONNX DeformConv instead, which ONNX Runtime runs (and which the
    # rewrite stage proves equal to the original).

    ref_model = _deformconv_form(load_model(req.model))
    if ref_model is None:
        return {"_status": "skipped", "reason": "ONNX Runtime can run neither the model nor the prepared graph"}
    try:
        with atomic_dir(plan.engine_path.parent) as scratch:
            ref_path = save_model(ref_model, scratch / "reference.onnx")
            ort.session(ref_path)
            return run(ref_path, f"{req.model.name} with DCN rewritten to DeformConv")
    except InvalidModelError:
        pass
    return {"_status": "skipped", "reason": "ONNX Runtime can run neither the model nor the prepared graph"}
