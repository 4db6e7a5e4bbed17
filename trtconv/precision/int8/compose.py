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

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtconv.errors import PrecisionNotAchievedError
from trtconv.onnxutil import GraphView, iter_graphs
from trtconv.precision.int8.accuracy import Cutoff, accuracy_report
from trtconv.precision.int8.bias import BiasCorrection, apply_bias_shifts, bias_shifts
from trtconv.precision.int8.calib_cache import add_to_sidecar, cache_meta
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
from trtconv.precision.int8.choice import (
    CalibrationOption,
    best_option,
    choose_calibration,
    scored,
    with_margin,
)
from trtconv.precision.int8.claim import samples_needed
from trtconv.precision.int8.gate import (
    COMPUTE_OPS,
    GateInputs,
    GateOutcome,
    ShareLimit,
    agrees,
    int8_layers,
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
from trtconv.precision.int8.report import (
    FP16_RETRY,
    Int8AccuracyError,
    Int8EvidenceError,
    Int8Report,
    Int8Result,
    Int8ShareError,
    gate_failed,
    gate_verdict,
    share_unreachable,
    too_few_samples,
)
from trtconv.precision.int8.resident import resident
from trtconv.precision.int8.smooth import (
    ALPHAS,
    Smoothing,
    channel_maxima,
    smoothed_scales,
    smoothing_factors,
)
from trtconv.samples import sample_count

__all__ = [
    "DEFAULT_TRT_VERSION", "FP16_QDQ_OPSET", "MIN_QDQ_OPSET", "REMAINDER_FP16", "CalibrationSession",
    "Int8AccuracyError", "Int8EvidenceError", "Int8ShareError", "Int8Report", "gate_verdict",
    "Int8Result", "Int8Settings", "ProgressFn", "Remainder", "_prepare",
    "accuracy_report", "calibration_session", "collect_scales", "proto_sha256", "quantize_int8", "upgrade_opset",
]

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


def _require_reachable_share(where: _Placement, settings: Int8Settings) -> None:
    """Fewer compute layers can take INT8 at all than ``min_share`` asks: exit 8 before calibrating, with the
    skips' commonest reasons. (A model written at exit 0 with no INT8 layer would be INT8 in name only, and
    ``build`` refused the same model after its whole build.)"""
    if settings.min_share <= 0 or not where.compute_layers:
        return
    can = len(int8_layers(where.plan.placements))
    need = math.ceil(settings.min_share * where.compute_layers - 1e-9)
    if can >= need:
        return
    reasons = Counter(s.reason for s in where.plan.skips if s.op_type in COMPUTE_OPS)
    why = "; ".join(f"{n} x {r}" for r, n in reasons.most_common(2))
    raise PrecisionNotAchievedError(
        f"only {can} of {where.compute_layers} compute layers (Conv/MatMul/Gemm) can take INT8, below the share "
        f"({settings.min_share:.0%})" + (f"; skipped: {why}" if why else ""),
        hint="--precision fp16, or a lower --min-precision-share (docs/precision.md)", retry=FP16_RETRY)


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
            memo: list[dict[str, np.ndarray]] | None = None
            ) -> tuple[Calibration, str, tuple[CalibrationOption, ...], PerTensorChoice | None, tuple[int, ...]]:
    """``method="auto"``: the candidate calibration whose model agrees best on the selection samples
    (without them, or on a cache hit, the scales at hand: entropy, or the cached choice), and the selection
    samples hardest for it, hardest first (what the auto-exclude checks measure first)."""
    if not cal.candidates:
        return cal, ("cache" if cal.cache.hit else settings.method), (), None, ()
    if samples is None:
        return keep_candidate(cal, "entropy", settings), "entropy", (), None, ()
    make = _builder(cal, settings, has_twin, check_loads=False)
    label, options, hardest = choose_calibration(cal.candidates, where.plan.placements, where.absent, make, prepared,
                                                 reference, samples, settings, progress, memo,
                                                 early_stop=settings.early_stop and not settings.auto_per_tensor)
    mix = None
    if settings.auto_per_tensor:  # the winner, with each tensor another candidate suits far better
        if progress:
            progress("per-tensor", 0, None)
        mix = per_tensor_choice(prepared.get()[1], where.plan.placements, where.absent, cal.candidates,
                                choice_samples(calib_samples, samples), base=label)
        cal = replace(cal, candidates={**cal.candidates, PER_TENSOR: mix.scales})
        _, more, _ = choose_calibration({PER_TENSOR: mix.scales}, where.plan.placements, where.absent, make, prepared,
                                        reference, samples, settings, progress, memo)
        label, options = best_option((*options, *more))
    meta = {"per_tensor_methods": dict(sorted(mix.methods.items()))} if mix is not None and label == PER_TENSOR else None
    return keep_candidate(cal, label, settings, meta), label, options, mix, hardest


def _try_bias_correction(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
                         samples: Iterable[Mapping[str, np.ndarray]], calib_samples: Iterable[Mapping[str, np.ndarray]],
                         settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
                         memo: list[dict[str, np.ndarray]], smooth: Smoothing | None,
                         hardest: tuple[int, ...] = ()) -> tuple[BiasCorrection | None, Candidate | None]:
    """``method="auto"``: the chosen scales' bias correction, measured on the calibration samples and kept when
    the whole model then agrees better with FP32 on the selection samples (passing first, then worst cosine);
    and, kept, the candidate it measured: the very model the gate judges next."""
    chosen = next((o for o in options if o.chosen), None)
    if chosen is None:
        return None, None
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
        return None, None
    trial = BiasCorrection(shifts, chosen.worst_cosine, chosen.worst_cosine, True, 0)
    builder = _builder(cal, settings, has_twin, check_loads=False, bias=trial, smooth=smooth)(prepared.get())
    # kept only when it beats the uncorrected model: measured until it cannot
    stop = Cutoff(chosen.passes, chosen.worst_cosine, settings.thresholds, hardest) if settings.early_stop else None
    candidate = builder.build(placed)
    acc = candidate.accuracy(reference, samples, settings.top1, None, memo, stop)
    option = scored("bias-correction", acc, settings.thresholds)
    corrected = apply_bias_shifts(prepared.get()[0], shifts, {(p.graph, p.node) for p in placed}, dry_run=True)
    kept = not option.stopped and (option.passes, option.worst_cosine) > (chosen.passes, chosen.worst_cosine)
    return BiasCorrection(shifts, chosen.worst_cosine, option.worst_cosine, kept, corrected,
                          passes=None if option.stopped else option.passes,
                          stopped=option.stopped), candidate if kept else None


def _bias_correction(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
                     samples: Iterable[Mapping[str, np.ndarray]] | None, calib_samples: Iterable[Mapping[str, np.ndarray]],
                     settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
                     memo: list[dict[str, np.ndarray]], progress: ProgressFn | None,
                     smooth: Smoothing | None = None, hardest: tuple[int, ...] = ()
                     ) -> tuple[BiasCorrection | None, Candidate | None]:
    """``method="auto"``'s bias correction: measured and judged on a calibration run, and kept in the cache's
    sidecar; a cache hit replays the kept one, so the model is the same with or without the cache. With it, the
    corrected candidate when this run measured it (:func:`_try_bias_correction`)."""
    if settings.method != "auto" or not settings.auto_bias_correction:
        return None, None
    if cal.cache.hit:
        bias = BiasCorrection.replayed(cache_meta(cal.cache.path).get("bias_correction"), 0)
        if bias is None:
            return None, None
        placed, _ = finalize_placements(where.plan.placements, cal.scales, where.absent)
        layers = {(p.graph, p.node) for p in placed}
        return replace(bias, corrected=apply_bias_shifts(prepared.get()[0], bias.shifts, layers, dry_run=True)), None
    if not options or samples is None or (
            settings.early_stop and with_margin(next(o for o in options if o.chosen), settings.thresholds)):
        return None, None  # the early stop: a candidate with margin needs no correction
    if progress:
        progress("bias-correction", 0, None)
    bias, candidate = _try_bias_correction(cal, where, prepared, reference, samples, calib_samples, settings,
                                           has_twin, options, memo, smooth, hardest)
    if bias is not None and bias.kept and cal.cache.path and settings.use_cache:
        add_to_sidecar(cal.cache.path, cal.cache.key, {"bias_correction": bias.stored()})
    return bias, candidate


def _smoothing(cal: Calibration, where: _Placement, prepared: PreparedModels, reference: onnx.ModelProto,
               samples: Iterable[Mapping[str, np.ndarray]] | None, calib_samples: Iterable[Mapping[str, np.ndarray]],
               settings: Int8Settings, has_twin: bool, options: Sequence[CalibrationOption],
               memo: list[dict[str, np.ndarray]], progress: ProgressFn | None) -> Smoothing | None:
    """``method="auto"``'s SmoothQuant migration (smooth): each alpha measured and judged on a calibration
    run, the best kept when the whole model then agrees better with FP32 on the selection samples (passing first,
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
        tried.append((agrees(acc, settings.thresholds),
                      min((st.cosine for st in acc.stats), default=1.0), alpha))
    passes, worst, alpha = max(tried)
    smooth = Smoothing(alpha, per_alpha[alpha], rescaled[alpha], chosen.worst_cosine, worst,
                       (passes, worst) > (chosen.passes, chosen.worst_cosine), tuple((a, w) for _, w, a in tried),
                       time.perf_counter() - t0, passes)
    if smooth.kept and cal.cache.path and settings.use_cache:
        add_to_sidecar(cal.cache.path, cal.cache.key, {"smoothing": smooth.stored()})
    return smooth


def _first_candidate(prepared: PreparedModels, make: Any, placed: Sequence[Placement],
                     built: Candidate | None = None) -> tuple[Candidate, list[Placement]]:
    """The candidate with every placement (``built``: that candidate, built already), and the placements its
    calibration form runs; the prepared models go afterwards (only a failing gate derives them again)."""
    builder = make(prepared.get())
    candidate, runnable = built if built is not None else builder.build(placed), builder.runnable(placed)
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
    select_samples: Iterable[Mapping[str, np.ndarray]] | None = None,
    calibration_model: onnx.ModelProto | None = None,
    progress: ProgressFn | None = None,
    eval_held_out: bool = True,
) -> Int8Result:
    """Calibrate ``model`` on ``calib_samples`` and return it with explicit INT8 Q/DQ.

    ``select_samples`` choose (method, smoothing, bias correction, exclusions; default: the calibration samples
    when re-readable); ``eval_samples`` judge the chosen model once and nothing else reads them. Too few judged
    samples for the claim: :class:`Int8EvidenceError` (exit 11), before any work when countable, unless
    ``settings.unverified``. ``calibration_model``: an ONNX Runtime-runnable twin with the same tensor names
    (e.g. DeformConv for plugins), measured instead. ``eval_held_out=False``: the ``eval_samples`` are not held
    out (never "passed"). Raises :class:`Int8AccuracyError` (exit 7), :class:`Int8ShareError` (exit 8),
    DataError (exit 11) for bad samples.
    """
    judged = sample_count(eval_samples) if eval_samples is not None and eval_held_out else None
    if judged is not None and judged < samples_needed() and not settings.unverified:
        raise too_few_samples(judged, samples_needed())
    clock = _Clock(progress)
    prepared = PreparedModels.of(model, calibration_model, settings)
    where = _place(prepared, settings)
    _require_reachable_share(where, settings)
    cal = calibrate(prepared, where.needed, calib_samples, settings, model_path=model_path, progress=clock)
    clock.lap("calibrate")
    selection = resident(select_samples if select_samples is not None else (
        calib_samples if iter(calib_samples) is not calib_samples else None))
    reference = calibration_model if calibration_model is not None else model
    memo: list[dict[str, np.ndarray]] = []  # the reference's outputs on the selection samples (method "auto")
    twin = calibration_model is not None
    cal, chosen, options, mix, hardest = _choose(cal, where, prepared, reference, selection, settings, twin, clock,
                                                 calib_samples, memo)
    clock.lap("choose-calibration")
    smooth = _smoothing(cal, where, prepared, reference, selection, calib_samples, settings, twin, options, memo,
                        clock)
    if smooth is not None and smooth.kept:  # the smoothed tensors' ranges, measured again
        cal = replace(cal, scales={**cal.scales, **smooth.scales})
    clock.lap("smoothing")
    bias, corrected = _bias_correction(cal, where, prepared, reference, selection, calib_samples, settings, twin,
                                       options, memo, clock, smooth, hardest)
    clock.lap("bias-correction")
    placed, late_skips = finalize_placements(where.plan.placements, cal.scales, where.absent)
    make = _builder(cal, settings, twin, check_loads=eval_samples is None, bias=bias, smooth=smooth)
    candidate, runnable = _first_candidate(prepared, make, placed, corrected if eval_samples is not None else None)
    del corrected  # a kept correction's trial built this very candidate (load checks off, as with judging samples)
    share = ShareLimit(settings.min_share, where.compute_layers, int8_layers(placed))
    outcome = run_gate(candidate, placed, GateInputs(reference, selection, eval_samples, settings, cal.scales,
                                                     runnable, make, share, _verdict(options, bias, smooth, cal),
                                                     memo, hardest), prepared, clock)
    clock.lap("gate")
    check_valid(outcome.candidate.model, lambda: prepared.get()[0])
    checked_on = None if eval_samples is None or not outcome.samples else (
        "held-out" if eval_held_out else "calibration")
    claim = outcome.claim if eval_held_out else None
    short = claim is not None and claim.too_few
    report = replace(
        _report(settings, prepared, cal, outcome, (*where.plan.skips, *late_skips, *outcome.skips), checked_on),
        chosen_method=chosen, calibration_choice=options, per_tensor=mix, bias_correction=bias, smoothing=smooth,
        claim=claim, unverified=settings.unverified and (short or checked_on != "held-out"),
        int8_share=_share(outcome.placed, share), share_needed_below=outcome.share_needed_below,
        parts=_parts(cal.runs or sample_count(calib_samples), sample_count(select_samples) if select_samples else 0,
                     _set_aside(eval_samples, outcome.samples) if eval_held_out else 0),
        phases=tuple(clock.laps))
    result = Int8Result(outcome.candidate.model, report)
    if outcome.unreachable:
        raise share_unreachable(result, share)
    if report.violations:
        raise gate_failed(result, settings)
    if short and not settings.unverified:
        assert claim is not None
        raise too_few_samples(claim.judged, claim.needed, result=result, misses=claim.judged - claim.meeting,
                              counted=claim.counted() if claim.samples is not None else "judged sample(s)")
    return result


def _verdict(options: Sequence[CalibrationOption], bias: BiasCorrection | None, smooth: Smoothing | None,
             cal: Calibration) -> bool | None:
    """Whether the final candidate agreed with FP32 on the selection samples, when choosing measured that very
    model in full this run (the chosen scales, with the smoothing and the bias correction kept); None: not known."""
    if cal.cache.hit:
        return None
    if bias is not None and bias.kept:
        return bias.passes
    if smooth is not None and smooth.kept:
        return smooth.passes
    chosen = next((o for o in options if o.chosen), None)
    return None if chosen is None or chosen.stopped else chosen.passes


def _parts(calibration: int | None, selection: int | None, judging: int) -> tuple[tuple[str, int], ...]:
    """Samples per part, as the report lists them (a count that cannot be known is left out)."""
    counts = (("calibration", calibration), ("selection", selection), ("judging", judging))
    return tuple((k, n) for k, n in counts if n is not None)


def _set_aside(judging: Iterable[Mapping[str, np.ndarray]] | None, judged: int) -> int:
    """The judging part's size: what was judged, or (exit 8 stops before the judgement) what was set aside."""
    return judged or (sample_count(judging) if judging is not None else None) or 0


def _share(placed: Sequence[Placement], share: ShareLimit) -> float:
    """The share of the compute layers the final model keeps in INT8."""
    return len(int8_layers(placed)) / share.compute_layers if share.compute_layers else 0.0


class _Clock:
    """The progress callback, timing each phase (the report's ``phases``: where the time went)."""

    def __init__(self, progress: ProgressFn | None) -> None:
        self.progress = progress
        self.laps: list[tuple[str, float]] = []
        self.t0 = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if self.progress:
            self.progress(stage, done, total)

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        if now - self.t0 >= 0.0005:
            self.laps.append((phase, now - self.t0))
        self.t0 = now


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
        sensitivity_sessions=outcome.sensitivity_sessions, selection_share=outcome.selection_share,
    )

