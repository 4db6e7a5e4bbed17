"""INT8 made explicit: calibrate on real data, insert Q/DQ, prove the accuracy on held-out data.

The library API behind ``trtconv quantize --precision int8``. It never prints: progress
goes to an optional callback, and everything the user should know (each Q/DQ placed or
skipped and why, every scale, the cache hit or miss, the accuracy against FP32) is in
the returned report.

The stages, each a few functions over plain data in its own module: settings
(``parameters``) -> the prepared model, held or let go in one place (``prepare``) ->
calibration (``calibration``) -> placement (``qdq.plan_qdq``) -> Q/DQ insertion
(``candidate``) -> the gate and auto-exclude (``gate``). This module composes them
and holds the report.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtconv.errors import AccuracyError, PrecisionNotAchievedError
from trtconv.onnxutil import GraphView, iter_graphs
from trtconv.precision.bn_fold import FoldedBatchNorm
from trtconv.precision.fp16 import Fp16Report
from trtconv.precision.int8.accuracy import WorstSample, accuracy_report
from trtconv.precision.int8.bias import BiasCorrection, apply_bias_shifts, bias_shifts
from trtconv.precision.int8.calib_cache import CacheInfo, add_to_sidecar, cache_meta
from trtconv.precision.int8.calibration import (
    Calibration,
    CalibrationSession,
    calibrate,
    calibration_session,
    collect_scales,
    keep_candidate,
    proto_sha256,
)
from trtconv.precision.int8.candidate import (
    Candidate,
    CandidateBuilder,
    check_valid,
    finalize_placements,
    smoothed,
)
from trtconv.precision.int8.choice import CalibrationOption, best_option, choose_calibration
from trtconv.precision.int8.gate import (
    AUTO_EXCLUDED,
    COMPUTE_OPS,
    GateInputs,
    GateOutcome,
    ShareLimit,
    run_gate,
)
from trtconv.precision.int8.parameters import (
    DEFAULT_TRT_VERSION,
    FP16_QDQ_OPSET,
    MIN_QDQ_OPSET,
    REMAINDER_FP16,
    Int8Settings,
    ProgressFn,
    Remainder,
)
from trtconv.precision.int8.per_tensor import PER_TENSOR, PerTensorChoice, choice_samples, per_tensor_choice
from trtconv.precision.int8.prepare import Pair, PreparedModels, _prepare, upgrade_opset
from trtconv.precision.int8.qdq import Placement, Plan, Skip, plan_qdq
from trtconv.precision.int8.sensitivity import LayerError
from trtconv.precision.int8.smooth import (
    ALPHAS,
    Smoothing,
    channel_maxima,
    smoothed_scales,
    smoothing_factors,
)
from trtconv.reference import OutputStats, Thresholds, violations

__all__ = [
    "DEFAULT_TRT_VERSION", "FP16_QDQ_OPSET", "MIN_QDQ_OPSET", "REMAINDER_FP16", "CalibrationSession",
    "WEAK_BELOW", "Int8AccuracyError", "Int8ShareError", "Int8Report", "gate_verdict", "Int8Result", "Int8Settings", "ProgressFn", "Remainder", "_prepare",
    "accuracy_report", "calibration_session", "collect_scales", "proto_sha256", "quantize_int8", "upgrade_opset",
]

WORST_NAMED = 3  # layers a failing gate names
# Below this many held-out samples a pass is "weak": with 2 samples a 0.99 cosine says little about
# the next image (a YOLOv8 detector passed on its own few held-out samples and reached 0.908 on one
# it never saw). 8 held out is 40 samples at the default 20 % hold-out.
WEAK_BELOW = 8


def gate_verdict(passed: bool | None, samples: int) -> str:
    """"passed on n=8 samples", "passed on n=2 samples: weak", "failed on n=5 samples", "not checked"."""
    if passed is None:
        return "not checked"
    if not passed:
        return f"failed on n={samples} samples"
    return f"passed on n={samples} samples" + (": weak" if samples < WEAK_BELOW else "")


@dataclass(frozen=True)
class Int8Report:
    method: str
    placed: tuple[Placement, ...]
    skipped: tuple[Skip, ...]
    scales: dict[str, float]
    cache: CacheInfo
    calibration_runs: int  # ORT runs spent calibrating: 0 when the cache was used
    calibration_seconds: float
    opset_upgrade: tuple[int, int] | None
    accuracy: tuple[OutputStats, ...] = ()
    accuracy_samples: int = 0
    violations: tuple[str, ...] = ()
    clip_guarded: tuple[str, ...] = ()  # entropy thresholds the clip guard raised (this run only)
    checked_on: str | None = None  # "held-out" | "calibration" samples, None: accuracy not checked
    thresholds: Thresholds = field(default_factory=Thresholds)
    remainder: str = "fp32"
    fp16: Fp16Report | None = None  # the FP16 remainder's conversion (what stayed FP32 and why)
    folded_batchnorms: tuple[FoldedBatchNorm, ...] = ()
    sensitivity: tuple[LayerError, ...] = ()  # worst first
    auto_excluded: tuple[str, ...] = ()  # layers --auto-exclude kept out of INT8
    gate_checks: int = 0  # candidate models the auto-exclude search ran
    worst_samples: tuple[WorstSample, ...] = ()  # each output's worst held-out sample
    gate_evaluations: int = 0  # full-model ONNX Runtime passes over the held-out samples
    chosen_method: str = ""  # method "auto": the candidate kept ("cache": the cached choice)
    calibration_choice: tuple[CalibrationOption, ...] = ()  # method "auto": every candidate and its score
    per_tensor: PerTensorChoice | None = None  # method "auto": the per-tensor mix (tensor -> candidate it took)
    bias_correction: BiasCorrection | None = None  # method "auto": the bias correction measured, and if kept
    smoothing: Smoothing | None = None  # method "auto": the SmoothQuant migration measured, and if kept
    sensitivity_sessions: int = 0  # of them, the per-layer error's (1; 4 with weights on disk)

    @property
    def passed(self) -> bool | None:
        """True only when held-out accuracy meets the thresholds; None when that was not checked."""
        if self.violations:
            return False
        return True if self.checked_on == "held-out" else None

    @property
    def weak(self) -> bool:
        """A pass judged on fewer than ``WEAK_BELOW`` held-out samples: it may not hold on new data."""
        return bool(self.passed) and self.accuracy_samples < WEAK_BELOW

    @property
    def verdict(self) -> str:
        """The gate's verdict in words, with the number of held-out samples it rests on."""
        return gate_verdict(self.passed, self.accuracy_samples)

    def to_json(self) -> dict[str, Any]:
        excluded = {(s.graph, s.node) for s in self.skipped if s.reason.startswith(AUTO_EXCLUDED)}
        return {
            "method": self.method,
            "placed": [p.to_json() for p in self.placed],
            "skipped": [s.to_json() for s in self.skipped],
            "scales": dict(sorted(self.scales.items())),
            "cache": self.cache.to_json(),
            "calibration_runs": self.calibration_runs,
            "calibration_seconds": round(self.calibration_seconds, 3),
            "opset_upgrade": list(self.opset_upgrade) if self.opset_upgrade else None,
            "accuracy": [s.to_json() for s in self.accuracy],
            "accuracy_samples": self.accuracy_samples,
            "violations": list(self.violations),
            "clip_guarded": list(self.clip_guarded),
            "checked": self.checked_on == "held-out",
            "accuracy_check": self.checked_on or "not checked",
            "thresholds": self.thresholds.to_json(),
            "remainder": self.remainder,
            "fp16_remainder": None if self.fp16 is None else {
                k: v for k, v in self.fp16.to_json().items() if k not in ("accuracy", "violations", "passed", "samples")},
            "folded_batchnorms": [f.__dict__ for f in self.folded_batchnorms],
            "sensitivity": [{**e.to_json(), "excluded": e.key in excluded} for e in self.sensitivity],
            "auto_excluded": list(self.auto_excluded),
            "gate_checks": self.gate_checks,
            "gate_evaluations": self.gate_evaluations,
            "chosen_method": self.chosen_method or self.method,
            "calibration_choice": [o.to_json() for o in self.calibration_choice],
            "bias_correction": None if self.bias_correction is None else self.bias_correction.to_json(),
            "smoothing": None if self.smoothing is None else self.smoothing.to_json(),
            "per_tensor_methods": None if self.per_tensor is None else dict(sorted(self.per_tensor.methods.items())),
            "sensitivity_sessions": self.sensitivity_sessions,
            "passed": self.passed,
            "held_out_samples": self.accuracy_samples if self.checked_on == "held-out" else 0,
            "worst_samples": [w.to_json() for w in self.worst_samples],
            "weak": self.weak,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Int8Result:
    model: onnx.ModelProto
    report: Int8Report


class Int8ShareError(PrecisionNotAchievedError):
    """Auto-exclude stopped: the gate needs more layers out of INT8 than ``min_share`` allows (exit 8)."""

    def __init__(self, message: str, result: Int8Result, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.result = result


class Int8AccuracyError(AccuracyError):
    """Accuracy below the thresholds; ``result`` still holds the model and the full report."""

    def __init__(self, message: str, result: Int8Result, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.result = result


# ----------------------------------------------------------------------------- the stages


@dataclass(frozen=True)
class _Placement:
    """Where Q/DQ go, and which activations calibration must measure."""

    plan: Plan
    needed: list[str]  # activation tensors to calibrate (those the calibration form has)
    absent: set[str]  # activation tensors the calibration form lacks
    compute_layers: int  # Conv/ConvTranspose/MatMul/Gemm in the prepared model (what the INT8 share counts)


def _place(prepared: PreparedModels, settings: Int8Settings) -> _Placement:
    work, cal_model = prepared.get()
    plan = plan_qdq(work, exclude=settings.exclude, residual_add=settings.residual_add)
    needed = plan.activation_tensors()
    compute = sum(n.op_type in COMPUTE_OPS for g in iter_graphs(work.graph) for n in g.node)
    if prepared.twin is None:
        return _Placement(plan, needed, set(), compute)
    known = set(GraphView(cal_model).produced()) | {i.name for i in cal_model.graph.input}
    return _Placement(plan, [t for t in needed if t in known], {t for t in needed if t not in known}, compute)


def _builder(cal: Calibration, settings: Int8Settings, has_twin: bool, check_loads: bool,
             bias: BiasCorrection | None = None, smooth: Smoothing | None = None):
    """How to build a candidate from the prepared pair, with these scales and peaks (and the bias
    correction and the smoothing, when kept)."""
    shifts = bias.shifts if bias is not None and bias.kept else {}
    factors = smooth.factors if smooth is not None and smooth.kept else {}

    def make(pair: Pair, scales: Mapping[str, float] | None = None) -> CandidateBuilder:
        return CandidateBuilder(pair[0], pair[1] if has_twin else None, cal.scales if scales is None else scales,
                                settings, cal.peaks, check_loads=check_loads, bias=shifts,
                                smooth=factors)
    return make


def _choose(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
            samples: Iterable[Mapping[str, np.ndarray]] | None, settings: Int8Settings, has_twin: bool,
            progress: ProgressFn | None, calib_samples: Iterable[Mapping[str, np.ndarray]] = (),
            memo: list[dict[str, np.ndarray]] | None = None) -> tuple[Calibration, str, tuple[CalibrationOption, ...], PerTensorChoice | None]:
    """``method="auto"``: the candidate calibration whose model agrees best on the held-out samples
    (without them, or on a cache hit, the scales at hand: entropy, or the cached choice)."""
    if not cal.candidates:
        return cal, ("cache" if cal.cache.hit else settings.method), (), None
    if samples is None:
        return keep_candidate(cal, "entropy", settings), "entropy", (), None
    make = _builder(cal, settings, has_twin, check_loads=False)
    label, options = choose_calibration(cal.candidates, where.plan.placements, where.absent, make, prepared,
                                        reference, samples, settings, progress, memo)
    mix = None
    if settings.auto_per_tensor:  # the winner, with each tensor another candidate suits far better
        if progress:
            progress("per-tensor", 0, None)
        mix = per_tensor_choice(prepared.get()[1], where.plan.placements, where.absent, cal.candidates,
                                choice_samples(calib_samples, samples), base=label)
        cal = replace(cal, candidates={**cal.candidates, PER_TENSOR: mix.scales})
        _, more = choose_calibration({PER_TENSOR: mix.scales}, where.plan.placements, where.absent, make, prepared,
                                     reference, samples, settings, progress, memo)
        label, options = best_option((*options, *more))
    meta = {"per_tensor_methods": dict(sorted(mix.methods.items()))} if mix is not None and label == PER_TENSOR else None
    return keep_candidate(cal, label, settings, meta), label, options, mix


def _try_bias_correction(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
                         samples: Iterable[Mapping[str, np.ndarray]], calib_samples: Iterable[Mapping[str, np.ndarray]],
                         settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
                         memo: list[dict[str, np.ndarray]], smooth: Smoothing | None) -> BiasCorrection | None:
    """``method="auto"``: the chosen scales' bias correction, measured on the calibration samples and kept when
    the whole model then agrees better with FP32 on the held-out samples (passing first, then worst cosine)."""
    chosen = next((o for o in options if o.chosen), None)
    if chosen is None:
        return None
    if smooth is not None and smooth.kept:  # judged against the smoothed model it would go into
        chosen = CalibrationOption(chosen.label, smooth.worst_cosine_with, smooth.passes, True)
    placed, _ = finalize_placements(where.plan.placements, cal.scales, where.absent)
    cal_model = prepared.get()[1]
    if smooth is not None and smooth.kept:
        cal_model = smoothed(cal_model, smooth.factors)
    names = {n.name for g in iter_graphs(cal_model.graph) for n in g.node}
    shifts = bias_shifts(cal_model, [p for p in placed if p.node in names], cal.scales,
                         choice_samples(calib_samples, samples))
    del cal_model
    if not shifts:
        return None
    trial = BiasCorrection(shifts, chosen.worst_cosine, chosen.worst_cosine, True, 0)
    builder = _builder(cal, settings, has_twin, check_loads=False, bias=trial, smooth=smooth)(prepared.get())
    acc = builder.build(placed).accuracy(reference, samples, settings.top1, None, memo)
    worst = min((st.cosine for st in acc.stats), default=1.0)
    passes = not violations(list(acc.stats), settings.thresholds)
    corrected = apply_bias_shifts(prepared.get()[0], shifts, {(p.graph, p.node) for p in placed}, dry_run=True)
    return BiasCorrection(shifts, chosen.worst_cosine, worst, (passes, worst) > (chosen.passes, chosen.worst_cosine),
                          corrected)


def _bias_correction(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
                     samples: Iterable[Mapping[str, np.ndarray]] | None, calib_samples: Iterable[Mapping[str, np.ndarray]],
                     settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
                     memo: list[dict[str, np.ndarray]], progress: ProgressFn | None,
                     smooth: Smoothing | None = None) -> BiasCorrection | None:
    """``method="auto"``'s bias correction: measured and judged on a calibration run, and kept in the cache's
    sidecar; a cache hit replays the kept one, so the model is the same with or without the cache."""
    if settings.method != "auto" or not settings.auto_bias_correction:
        return None
    if cal.cache.hit:
        bias = BiasCorrection.replayed(cache_meta(cal.cache.path).get("bias_correction"), 0)
        if bias is None:
            return None
        placed, _ = finalize_placements(where.plan.placements, cal.scales, where.absent)
        layers = {(p.graph, p.node) for p in placed}
        return replace(bias, corrected=apply_bias_shifts(prepared.get()[0], bias.shifts, layers, dry_run=True))
    if not options or samples is None:
        return None
    if progress:
        progress("bias-correction", 0, None)
    bias = _try_bias_correction(cal, where, prepared, reference, samples, calib_samples, settings, has_twin,
                                options, memo, smooth)
    if bias is not None and bias.kept and cal.cache.path and settings.use_cache:
        add_to_sidecar(cal.cache.path, cal.cache.key, {"bias_correction": bias.stored()})
    return bias


def _smoothing(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
               samples: Iterable[Mapping[str, np.ndarray]] | None, calib_samples: Iterable[Mapping[str, np.ndarray]],
               settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
               memo: list[dict[str, np.ndarray]], progress: ProgressFn | None) -> Smoothing | None:
    """``method="auto"``'s SmoothQuant migration (smooth): each alpha measured and judged on a calibration
    run, the best kept when the whole model then agrees better with FP32 on the held-out samples (passing first,
    then worst cosine), and kept in the cache's sidecar; a cache hit replays the kept one."""
    if settings.method != "auto" or not settings.auto_smoothing:
        return None
    if cal.cache.hit:
        return Smoothing.replayed(cache_meta(cal.cache.path).get("smoothing"))
    chosen = next((o for o in options if o.chosen), None)
    if chosen is None or samples is None:
        return None
    if progress:
        progress("smoothing", 0, None)
    t0 = time.perf_counter()
    data = choice_samples(calib_samples, samples)
    cal_model = prepared.get()[1]
    quantized = {p.tensor for p in finalize_placements(where.plan.placements, cal.scales, where.absent)[0]
                 if p.kind == "activation"}
    xmax = channel_maxima(cal_model, data, quantized)  # one pass (none: no LayerNorm to smooth)
    per_alpha = {a: f for a in ALPHAS if (f := smoothing_factors(cal_model, xmax, a))}
    if not per_alpha:
        return None
    rescaled = smoothed_scales(cal_model, per_alpha, chosen.label,
                               calib_samples if iter(calib_samples) is not calib_samples else data)
    del cal_model
    tried: list[tuple[bool, float, float]] = []
    for alpha, factors in per_alpha.items():
        trial = Smoothing(alpha, factors, rescaled[alpha], chosen.worst_cosine, chosen.worst_cosine, True)
        scales = {**cal.scales, **rescaled[alpha]}
        placed, _ = finalize_placements(where.plan.placements, scales, where.absent)
        builder = _builder(cal, settings, has_twin, check_loads=False, smooth=trial)(prepared.get(), scales)
        acc = builder.build(placed).accuracy(reference, samples, settings.top1, None, memo)
        tried.append((not violations(list(acc.stats), settings.thresholds),
                      min((st.cosine for st in acc.stats), default=1.0), alpha))
    passes, worst, alpha = max(tried)
    smooth = Smoothing(alpha, per_alpha[alpha], rescaled[alpha], chosen.worst_cosine, worst,
                       (passes, worst) > (chosen.passes, chosen.worst_cosine), tuple((a, w) for _, w, a in tried),
                       time.perf_counter() - t0, passes)
    if smooth.kept and cal.cache.path and settings.use_cache:
        add_to_sidecar(cal.cache.path, cal.cache.key, {"smoothing": smooth.stored()})
    return smooth


def _first_candidate(prepared: PreparedModels, make: Any, placed: Sequence[Placement]
                     ) -> tuple[Candidate, list[Placement]]:
    """The candidate with every placement, and the placements its calibration form runs; the
    prepared models go afterwards (only a failing gate derives them again)."""
    builder = make(prepared.get())
    candidate, runnable = builder.build(placed), builder.runnable(placed)
    del builder
    prepared.release()
    return candidate, runnable


def quantize_int8(
    model: onnx.ModelProto,
    settings: Int8Settings,
    calib_samples: Iterable[Mapping[str, np.ndarray]],
    *,
    model_path: Path | None = None,
    eval_samples: Iterable[Mapping[str, np.ndarray]] | None = None,
    calibration_model: onnx.ModelProto | None = None,
    progress: ProgressFn | None = None,
    eval_held_out: bool = True,
) -> Int8Result:
    """Calibrate ``model`` on ``calib_samples`` and return it with explicit INT8 Q/DQ.

    ``calibration_model``: an ONNX Runtime-runnable form of ``model`` with the same tensor
    names (e.g. plugin nodes replaced by ``DeformConv``); activations are measured on it and
    the scales carried over. ``eval_samples`` should be held out from calibration
    (``eval_held_out=False`` says they are not: the report then never says "passed"); the
    report's accuracy compares the INT8 model with ``model`` on them. Raises
    :class:`Int8AccuracyError` (exit 7) if that misses ``settings.thresholds`` — after
    ``settings.auto_exclude`` has tried keeping layers out of INT8 — and DataError (exit 11)
    for bad samples.
    """
    prepared = PreparedModels.of(model, calibration_model, settings)
    where = _place(prepared, settings)
    cal = calibrate(prepared, where.needed, calib_samples, settings, model_path=model_path, progress=progress)
    reference = calibration_model if calibration_model is not None else model
    memo: list[dict[str, np.ndarray]] = []  # the reference's outputs on the held-out samples (method "auto")
    cal, chosen, options, mix = _choose(cal, where, prepared, reference, eval_samples, settings,
                                        calibration_model is not None, progress, calib_samples, memo)
    smooth = _smoothing(cal, where, prepared, reference, eval_samples, calib_samples, settings,
                        calibration_model is not None, options, memo, progress)
    if smooth is not None and smooth.kept:  # the smoothed tensors' ranges, measured again
        cal = replace(cal, scales={**cal.scales, **smooth.scales})
    bias = _bias_correction(cal, where, prepared, reference, eval_samples, calib_samples, settings,
                            calibration_model is not None, options, memo, progress, smooth)
    placed, late_skips = finalize_placements(where.plan.placements, cal.scales, where.absent)
    make = _builder(cal, settings, calibration_model is not None, check_loads=eval_samples is None, bias=bias,
                    smooth=smooth)
    candidate, runnable = _first_candidate(prepared, make, placed)
    share = ShareLimit(settings.min_share, where.compute_layers,
                       len({(p.graph, p.node) for p in placed if p.op_type in COMPUTE_OPS}))
    if eval_samples is None:
        outcome = GateOutcome(candidate, tuple(placed))
    else:
        outcome = run_gate(candidate, placed, GateInputs(reference, eval_samples, settings, cal.scales, runnable, make,
                                                         share), prepared, progress)
    check_valid(outcome.candidate.model, lambda: prepared.get()[0])
    checked_on = None if eval_samples is None or not outcome.samples else (
        "held-out" if eval_held_out else "calibration")
    report = _report(settings, prepared, cal, outcome, (*where.plan.skips, *late_skips, *outcome.skips), checked_on)
    report = replace(report, chosen_method=chosen, calibration_choice=options, per_tensor=mix,
                     bias_correction=bias, smoothing=smooth)
    result = Int8Result(outcome.candidate.model, report)
    if outcome.unreachable:
        raise _share_unreachable(result, share)
    if report.violations:
        raise _gate_failed(result, settings)
    return result


def _report(settings: Int8Settings, prepared: PreparedModels, cal: Calibration, outcome: GateOutcome,
            skips: Sequence[Skip], checked_on: str | None) -> Int8Report:
    used = {p.tensor: cal.scales[p.tensor] for p in outcome.placed if p.kind == "activation"}
    return Int8Report(
        method=settings.method, placed=outcome.placed, skipped=tuple(skips), scales=used, cache=cal.cache,
        calibration_runs=cal.runs, calibration_seconds=cal.seconds, opset_upgrade=prepared.upgrade,
        accuracy=outcome.accuracy, accuracy_samples=outcome.samples, violations=outcome.violations,
        clip_guarded=tuple(sorted(cal.guarded & set(used))), checked_on=checked_on, thresholds=settings.thresholds,
        remainder=settings.remainder, fp16=outcome.candidate.fp16, folded_batchnorms=prepared.folded,
        sensitivity=outcome.sensitivity, auto_excluded=tuple(n for _, n in outcome.excluded),
        gate_checks=outcome.checks, worst_samples=outcome.worst, gate_evaluations=outcome.evaluations,
        sensitivity_sessions=outcome.sensitivity_sessions,
    )


def _gate_failed(result: Int8Result, settings: Int8Settings) -> Int8AccuracyError:
    bad, errors = result.report.violations, result.report.sensitivity
    worst = ", ".join(f"{e.node} ({e.op_type}, error {e.nmse:.3g})" for e in errors[:WORST_NAMED])
    tried_note = " even after --auto-exclude tried keeping layers out of INT8" if settings.auto_exclude else ""
    return Int8AccuracyError(
        f"INT8 accuracy below the thresholds{tried_note}: {bad[0]}"
        + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
        + (f"; the layers adding the most error: {worst}" if worst else ""),
        result,
        hint=("drop --no-auto-exclude (--auto-exclude, the default, keeps the fewest layers out of INT8 until the "
              "gate passes), " if not settings.auto_exclude else "")
        + "--exclude the layers named, calibrate on more representative data, or try --calib-method percentile",
    )


def _share_unreachable(result: Int8Result, share: ShareLimit) -> Int8ShareError:
    r = result.report
    return Int8ShareError(
        f"INT8 needs more than {max(share.budget, 0)} of {share.compute_layers} layers excluded to pass the gate; "
        f"below the share ({share.min_share:.0%} in INT8); use fp16 or lower it (stopped after {r.gate_checks} "
        f"candidate check(s), {r.gate_evaluations} full-model evaluations)",
        result,
        hint="--precision fp16, or a lower --min-precision-share; --sensitivity lists the layers to blame",
    )
