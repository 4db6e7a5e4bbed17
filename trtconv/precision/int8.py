"""INT8 made explicit: calibrate on real data, insert Q/DQ, prove the accuracy on held-out data.

The library API behind ``trtconv quantize --precision int8``. It never prints: progress
goes to an optional callback, and everything the user should know (each Q/DQ placed or
skipped and why, every scale, the cache hit or miss, the accuracy against FP32) is in
the returned report.

Over 400 lines because settings, report and the one orchestration (calibrate → place →
FP16 remainder → gate → auto-exclude) read best together; the calibration math, the
placement, the accuracy runs and the per-layer sensitivity each live in their own module.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx import version_converter

from trtconv.errors import AccuracyError, DataError, InternalError, UnsupportedModelError
from trtconv.load import (
    check_structure_only,
    copy_lazy,
    has_lazy_weights,
    inline_bytes,
    is_lazy,
    is_stripped,
    load_model,
    model_sha256,
    structure_only,
)
from trtconv.onnxutil import GraphView, constant_tensor, default_opset, is_default_domain, iter_graphs
from trtconv.precision.bn_fold import FoldedBatchNorm, fold_batchnorms
from trtconv.precision.calib_cache import CacheInfo, cache_key, read_cache, write_cache
from trtconv.precision.calibrate import Calibrator, CalibSettings, Method, scale_from_threshold
from trtconv.precision.expose import session_exposing
from trtconv.precision.fp16 import Fp16Report, Fp16Settings, convert_fp16
from trtconv.precision.fp16_graph import emulate_half
from trtconv.precision.int8_accuracy import accuracy_report, run_failure, with_origin
from trtconv.precision.peaks import activation_peaks, float_tensors, update_peak
from trtconv.precision.qdq import Placement, Skip, insert_qdq, plan_qdq
from trtconv.precision.sensitivity import LayerError, fewest_exclusions, layer_errors
from trtconv.reference import DEFAULT_THRESHOLDS, OutputStats, Thresholds, violations
from trtconv.samples import sample_count
from trtconv.settings import NEWEST_TENSORRT

log = logging.getLogger(__name__)

MIN_QDQ_OPSET = 13  # per-channel DequantizeLinear (axis) needs opset 13
FP16_QDQ_OPSET = 19  # QuantizeLinear/DequantizeLinear take float16 (input, scale, output) from opset 19
DEFAULT_TRT_VERSION = NEWEST_TENSORRT  # the calibration cache header's version when the target has none
WORST_NAMED = 3  # layers a failing gate names
Remainder = Literal["fp16", "fp32"]
# The FP16 remainder: the FP16 stage's overflow rules, without its own BN fold (done before Q/DQ)
# and accuracy check (the INT8 gate measures the whole model).
REMAINDER_FP16 = Fp16Settings(fold_batchnorm=False, check_accuracy=False)

# progress(stage, done, total): stage is "calibrate" or "accuracy"; total may be None
ProgressFn = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True)
class Int8Settings:
    """How to quantize. ``thresholds`` fail the run (AccuracyError, exit 7) when accuracy misses them.

    The gate is on by default (cosine >= 0.99 per output, as ``verify`` for INT8 engines).
    ``remainder``: what everything outside the Q/DQ pairs computes in — ``fp16`` (TensorRT 11
    runs a strongly typed network in the types the ONNX gives) under ``fp16``'s overflow rules,
    or ``fp32``.
    """

    method: Method = "entropy"
    percentile: float = 99.99
    exclude: tuple[str, ...] = ()  # fnmatch patterns over node names and op types
    residual_add: bool = True
    cache_path: Path | None = None
    use_cache: bool = True
    trt_version: str = DEFAULT_TRT_VERSION
    thresholds: Thresholds = field(default_factory=lambda: DEFAULT_THRESHOLDS["int8"])
    top1: bool | None = None  # None: for classifier-like outputs (softmax or [N, C])
    max_samples: int = 0  # 0 = every calibration sample
    remainder: Remainder = "fp16"
    fp16: Fp16Settings = REMAINDER_FP16  # the rules for the FP16 remainder
    fold_batchnorm: bool = True  # with the FP16 remainder: fold Conv -> BatchNormalization before Q/DQ
    auto_exclude: bool = False  # keep the fewest layers out of INT8 until the gate passes
    sensitivity: bool = False  # measure every quantized layer's own error (always done when the gate fails)


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

    @property
    def passed(self) -> bool | None:
        """True only when held-out accuracy meets the thresholds; None when that was not checked."""
        if self.violations:
            return False
        return True if self.checked_on == "held-out" else None

    def to_json(self) -> dict[str, Any]:
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
            "sensitivity": [e.to_json() for e in self.sensitivity],
            "auto_excluded": list(self.auto_excluded),
            "gate_checks": self.gate_checks,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class Int8Result:
    model: onnx.ModelProto
    report: Int8Report


class Int8AccuracyError(AccuracyError):
    """Accuracy below the thresholds; ``result`` still holds the model and the full report."""

    def __init__(self, message: str, result: Int8Result, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.result = result


# ----------------------------------------------------------------------------- helpers


def upgrade_opset(model: onnx.ModelProto, target: int = MIN_QDQ_OPSET) -> tuple[onnx.ModelProto, tuple[int, int] | None]:
    """Per-channel Q/DQ needs opset 13: convert older models rather than emit invalid ones."""
    current = default_opset(model)
    if current >= target:
        return model, None

    try:
        converted = version_converter.convert_version(structure_only(model), target)
        if not _restore_weights(converted, model):  # an adapter renamed or rewrote a weight: the slow way
            converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise UnsupportedModelError(
            f"cannot upgrade the model from opset {current} to {target} for INT8 Q/DQ: {str(exc).splitlines()[0]}",
            hint="re-export the model with opset >= 13",
        ) from exc
    return converted, (current, target)


def _main_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Main-graph initializers and Constant-node values, by tensor name (what ``structure_only`` strips)."""
    out = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        t = constant_tensor(n)
        if t is not None:
            out[n.output[0]] = t
    return out


def _restore_weights(converted: onnx.ModelProto, original: onnx.ModelProto) -> bool:
    """Put the original's bytes back into the tensors ``structure_only`` stripped (each weight is
    copied once, here); False when one of them has no original of the same name and size.

    The version converter serializes and parses the whole model on each side: on the structure
    alone it costs nothing, where the weights made it several transient copies of the model.
    """
    source = _main_constants(original)
    for name, t in _main_constants(converted).items():
        if not is_stripped(t):
            continue
        src = source.get(name)
        if src is None or list(src.dims) != list(t.dims) or src.data_type != t.data_type:
            return False
        keep = t.name
        t.CopyFrom(src)
        t.name = keep
        if t.data_location == onnx.TensorProto.DEFAULT:
            t.ClearField("data_location")  # as the converter writes it (loading external data sets it)
    return not any(is_stripped(t) for t in _main_constants(converted).values())


def proto_sha256(model: onnx.ModelProto) -> str:
    """The model's structure and the bytes of each large main-graph tensor: the same whether the
    weights are loaded or left on disk (content, never where it lies), read a block at a time."""
    stub = structure_only(model)
    h = hashlib.sha256(stub.SerializeToString(deterministic=True))
    pairs = list(zip(model.graph.initializer, stub.graph.initializer))
    for n, sn in zip(model.graph.node, stub.graph.node):
        pairs += [(a.t, sa.t) for a, sa in zip(n.attribute, sn.attribute) if a.type == onnx.AttributeProto.TENSOR]
    for t, st in pairs:
        if not is_stripped(st):
            continue
        h.update(t.name.encode() + b"\0")
        if is_lazy(t):
            copy_lazy(t, _Hashing(h))
        else:
            h.update(inline_bytes(t))
    return h.hexdigest()


@dataclass
class _Hashing:
    """A file-like ``write`` into a hash (what ``copy_lazy`` streams into)."""

    h: Any

    def write(self, block: bytes) -> None:
        self.h.update(block)


def _digest(samples: Any) -> str | None:
    fn = getattr(samples, "digest", None)
    return fn() if callable(fn) else None


# ----------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class CalibrationSession:
    """An ONNX Runtime session exposing what calibration reads. Made before the samples run, so
    that the model it was made from can go meanwhile: the session holds what it needs."""

    session: Any
    mapping: dict[str, str]  # output name -> tensor
    fed: tuple[str, ...]  # wanted tensors that are graph inputs: read from the samples themselves
    wanted: frozenset[str]
    every_float: bool  # every float tensor exposed too (the FP16 remainder's activation peaks)


def calibration_session(model: onnx.ModelProto, tensors: Sequence[str], *, peaks: bool = False) -> CalibrationSession:
    """``model`` with ``tensors`` (and with ``peaks``, every float tensor) exposed, graph optimizations on."""
    inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    observed = [t for t in dict.fromkeys([*tensors, *(float_tensors(model) if peaks else ())]) if t not in inputs]
    sess, mapping = session_exposing(model, observed, optimize=True)
    return CalibrationSession(sess, mapping, tuple(t for t in tensors if t in inputs), frozenset(tensors), peaks)


def collect_scales(
    run: CalibrationSession,
    samples: Iterable[Mapping[str, np.ndarray]],
    settings: CalibSettings,
    *,
    max_samples: int = 0,
    progress: ProgressFn | None = None,
    total: int | None = None,
    guarded: set[str] | None = None,
    peaks: dict[str, float] | None = None,
) -> tuple[dict[str, float], int]:
    """Run the session once per sample, streaming the wanted tensors into histograms.

    Returns (scale per tensor that carried float data, number of runs); tensors whose entropy
    threshold the clip guard raised are added to ``guarded``. ``peaks`` (the session must expose
    every float tensor): filled in the same runs with every float tensor's largest magnitude
    (the FP16 remainder's activation rule), instead of a second pass over the samples.
    """

    if peaks is not None and not run.every_float:
        raise InternalError("activation peaks asked of a calibration session that does not expose every float tensor")
    sess, mapping, fed, wanted = run.session, run.mapping, run.fed, run.wanted
    fetch = list(mapping)
    cal = Calibrator(settings)
    runs = 0
    if total is not None and max_samples:
        total = min(total, max_samples)
    for origin, sample in with_origin(samples, "calibration sample"):
        if max_samples and runs >= max_samples:
            break
        try:
            values = sess.run(fetch, dict(sample)) if fetch else []
        except Exception as exc:
            raise run_failure(origin, exc) from exc
        for name, val in zip(fetch, values):
            arr = np.asarray(val)
            if peaks is not None:
                update_peak(peaks, mapping[name], arr)
            if arr.dtype == np.float32 and arr.size and mapping[name] in wanted:
                cal.update(mapping[name], arr)
        for t in fed:
            arr = np.asarray(sample[t])
            if arr.dtype == np.float32:
                cal.update(t, arr)
        if peaks is not None:
            for k, v in sample.items():
                update_peak(peaks, k, np.asarray(v))
        del values
        runs += 1
        if progress:
            progress("calibrate", runs, total)
    if runs == 0:
        raise DataError("no calibration samples", hint="give at least one sample (dozens to hundreds are typical)")
    scales = {t: scale_from_threshold(th) for t, th in cal.thresholds().items()}
    if guarded is not None:
        guarded.update(cal.guarded)
    return scales, runs


# ----------------------------------------------------------------------------- the API


def _passes_checker(model: onnx.ModelProto) -> bool:
    """The input's own verdict: Q/DQ insertion inherits what the input already breaks (unsorted nodes...)."""
    try:
        check_structure_only(model, None)
    except onnx.checker.ValidationError:
        return False
    return True


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
    work, upgrade, folded = _prepare(model, settings)
    plan = plan_qdq(work, exclude=settings.exclude, residual_add=settings.residual_add)
    needed = plan.activation_tensors()
    skips = list(plan.skips)

    cal_model = _prepare(calibration_model, settings)[0] if calibration_model is not None else work
    if calibration_model is not None:
        known = set(GraphView(cal_model).produced()) | {i.name for i in cal_model.graph.input}
        absent = {t for t in needed if t not in known}
        needed = [t for t in needed if t in known]
    else:
        absent = set()

    # Weights left on disk (a large model): the prepared models hold references to them and to
    # their folded forms in scratch files, kilobytes: they are kept, not derived again.
    kept = (work, cal_model) if has_lazy_weights(model) and (calibration_model is None or has_lazy_weights(calibration_model)) else None

    def prepared_again() -> tuple[onnx.ModelProto, onnx.ModelProto]:
        """The prepared models once more (the same: upgrade and fold are deterministic), for what
        needs them after they were let go."""
        if kept is not None:
            return kept
        work = _prepare(model, settings)[0]
        return work, (_prepare(calibration_model, settings)[0] if calibration_model is not None else work)

    def builder_for(work: onnx.ModelProto, cal_model: onnx.ModelProto) -> _Builder:
        return _Builder(work, cal_model if calibration_model is not None else None, scales, settings, peaks,
                        check_loads=eval_samples is None)

    calib = CalibSettings(method=settings.method, percentile=settings.percentile)
    model_hash = proto_sha256(model) if model_path is None else _file_hash(model_path)
    if calibration_model is not None:
        model_hash = hashlib.sha256((model_hash + proto_sha256(calibration_model)).encode()).hexdigest()
    data_hash = _digest(calib_samples)
    params = {"percentile": calib.percentile, "bins": calib.bins, "levels": calib.levels,
              "max_samples": settings.max_samples, "batchnorm_folded": bool(folded)}
    key = cache_key(model_hash, data_hash or "", settings.method, params)

    scales: dict[str, float] | None = None
    reason = "no cache file given"
    cache_path = Path(settings.cache_path) if settings.cache_path else None
    if cache_path and not settings.use_cache:
        reason = "cache disabled"
    elif cache_path and data_hash is None:
        reason = "samples have no content hash; cannot key a cache"
    elif cache_path:
        scales, reason = read_cache(cache_path, key, set(needed))
    hit = scales is not None
    runs = 0
    guarded: set[str] = set()
    want_peaks = settings.remainder == "fp16" and settings.fp16.max_activation is not None
    peaks: dict[str, float] | None = {} if want_peaks and scales is None else None
    t0 = time.perf_counter()
    calibrated = scales is None
    if scales is None:
        run = calibration_session(cal_model, needed, peaks=peaks is not None)
        # The prepared models (a copy of the weights) are not needed while the samples run, next to
        # every exposed activation of a sample: they go, and come back (the same) for the build.
        del work, cal_model
        scales, runs = collect_scales(run, calib_samples, calib, max_samples=settings.max_samples,
                                      progress=progress, total=sample_count(calib_samples), guarded=guarded,
                                      peaks=peaks)
        del run
        if cache_path and data_hash is not None and settings.use_cache:
            write_cache(cache_path, scales, key=key, method=settings.method, trt_version=settings.trt_version,
                        meta={"model_sha256": model_hash, "data_sha256": data_hash, "params": params})
    seconds = time.perf_counter() - t0
    if calibrated:
        work, cal_model = prepared_again()
    cache = CacheInfo(str(cache_path) if cache_path else None, key, hit, reason)

    placed, more_skips = _finalize(plan.placements, scales, absent)
    skips += more_skips
    if want_peaks and peaks is None:  # a cache hit skipped the calibration pass that measures them
        if progress:
            progress("peaks", 0, None)
        peaks, _ = activation_peaks(cal_model, calib_samples, progress=lambda k: progress and progress("peaks", k, None))

    builder = builder_for(work, cal_model)
    candidate = builder.build(placed)
    runnable = builder.runnable(placed)
    # The prepared models hold a copy of the weights, and measuring the candidate does not need
    # them: they go now, and only a failed gate (sensitivity, auto-exclude) derives them again.
    del builder, work, cal_model
    accuracy: tuple[OutputStats, ...] = ()
    n_eval = 0
    bad: tuple[str, ...] = ()
    errors: tuple[LayerError, ...] = ()
    excluded: tuple[tuple[str, str], ...] = ()
    checks = 0
    reference = calibration_model if calibration_model is not None else model
    memo: list[dict[str, np.ndarray]] = []
    if eval_samples is not None:
        accuracy, n_eval = candidate.accuracy(reference, eval_samples, settings.top1, progress, memo)
        candidate = replace(candidate, twins=())  # measured: what follows needs the model, not its twins
        bad = tuple(violations(list(accuracy), settings.thresholds))
        if bad or settings.sensitivity:
            if progress:
                progress("sensitivity", 0, None)
            work, cal_model = prepared_again()
            errors = layer_errors(cal_model, runnable, scales, eval_samples)
        if bad and settings.auto_exclude:
            builder = builder_for(work, cal_model)
            tried: dict[frozenset[tuple[str, str]], tuple[_Candidate | None, tuple[OutputStats, ...], int]] = {}

            def passes(without: frozenset[tuple[str, str]]) -> bool:
                cand = builder.build([p for p in placed if (p.graph, p.node) not in without])
                stats, n = cand.accuracy(reference, eval_samples, settings.top1, None, memo)
                ok = not violations(list(stats), settings.thresholds)
                tried[without] = (cand if ok else None, stats, n)  # only a passing one may be kept
                if progress:
                    progress("auto-exclude", len(tried), None)
                return ok

            found = fewest_exclusions([e.key for e in errors], passes)
            checks = len(tried)
            del builder
            if found is not None:
                excluded = found
                kept, accuracy, n_eval = tried[frozenset(found)]
                assert kept is not None
                candidate = kept
                bad = ()
                placed = [p for p in placed if (p.graph, p.node) not in set(found)]
                ops = {e.key: e.op_type for e in errors}
                skips += [Skip(g, n, ops.get((g, n), ""), "kept out of INT8 by --auto-exclude: the gate passes "
                               "without it") for g, n in found]
    _check_valid(candidate.model, lambda: prepared_again()[0])
    used_scales = {p.tensor: scales[p.tensor] for p in placed if p.kind == "activation"}
    checked_on = None if eval_samples is None or not n_eval else ("held-out" if eval_held_out else "calibration")
    report = Int8Report(
        method=settings.method, placed=tuple(placed), skipped=tuple(skips), scales=used_scales, cache=cache,
        calibration_runs=runs, calibration_seconds=seconds, opset_upgrade=upgrade, accuracy=accuracy,
        accuracy_samples=n_eval, violations=bad, clip_guarded=tuple(sorted(guarded & set(used_scales))),
        checked_on=checked_on, thresholds=settings.thresholds, remainder=settings.remainder,
        fp16=candidate.fp16, folded_batchnorms=folded, sensitivity=errors,
        auto_excluded=tuple(n for _, n in excluded), gate_checks=checks,
    )
    result = Int8Result(candidate.model, report)
    if bad:
        worst = ", ".join(f"{e.node} ({e.op_type}, error {e.nmse:.3g})" for e in errors[:WORST_NAMED])
        tried_note = " even after --auto-exclude tried keeping layers out of INT8" if settings.auto_exclude else ""
        raise Int8AccuracyError(
            f"INT8 accuracy below the thresholds{tried_note}: {bad[0]}"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
            + (f"; the layers adding the most error: {worst}" if worst else ""),
            result,
            hint=("pass --auto-exclude to keep the fewest layers out of INT8 until the gate passes, "
                  if not settings.auto_exclude else "")
            + "--exclude the layers named, calibrate on more representative data, or try --calib-method percentile",
        )
    return result


def _prepare(model: onnx.ModelProto, settings: Int8Settings
             ) -> tuple[onnx.ModelProto, tuple[int, int] | None, tuple[FoldedBatchNorm, ...]]:
    """The FP32 model Q/DQ go into: opset high enough for the Q/DQ wanted; BatchNorms folded for FP16."""
    fp16 = settings.remainder == "fp16"
    work, upgrade = upgrade_opset(model, FP16_QDQ_OPSET if fp16 else MIN_QDQ_OPSET)
    folded: tuple[FoldedBatchNorm, ...] = ()
    if fp16 and settings.fold_batchnorm:
        work, folded = fold_batchnorms(work, copy=work is model)  # the upgrade's copy is ours to edit
    return work, upgrade, folded


@dataclass(frozen=True)
class _Candidate:
    """One INT8 model (as deployed), the model its accuracy is measured on, and its FP16 twin."""

    model: onnx.ModelProto
    runnable: onnx.ModelProto  # == model unless plugins: the calibration twin with the same Q/DQ
    twins: tuple[onnx.ModelProto, ...]  # exact-rounding FP16 twin of ``runnable`` (FP16 remainder)
    fp16: Fp16Report | None

    def accuracy(self, reference: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]],
                 top1: bool | None, progress: ProgressFn | None, memo: list[dict[str, np.ndarray]] | None = None
                 ) -> tuple[tuple[OutputStats, ...], int]:
        return accuracy_report(reference, self.runnable, samples, twins=self.twins, top1=top1, progress=progress,
                               total=sample_count(samples), optimize=self.fp16 is None, memo=memo)


@dataclass(frozen=True)
class _Builder:
    """Q/DQ (and the FP16 remainder) applied to the prepared model for a given set of placements."""

    work: onnx.ModelProto
    twin: onnx.ModelProto | None  # the runnable calibration form, prepared the same way
    scales: Mapping[str, float]
    settings: Int8Settings
    peaks: Mapping[str, float] | None
    check_loads: bool = True  # False when the accuracy check runs every candidate anyway

    def runnable(self, placed: Sequence[Placement]) -> list[Placement]:
        if self.twin is None:
            return list(placed)
        names = {n.name for g in iter_graphs(self.twin.graph) for n in g.node}
        return [p for p in placed if p.node in names]

    def _typed(self, base: onnx.ModelProto, placed: Sequence[Placement]) -> tuple[onnx.ModelProto, Any]:
        q = insert_qdq(base, placed, self.scales, half=self.settings.remainder == "fp16")
        q.ir_version = max(q.ir_version, 4)  # IR 3 wants every initializer listed as an input; we add some
        if self.settings.remainder != "fp16":
            return q, None
        res = convert_fp16(q, self.settings.fp16, None, peaks=self.peaks or {}, check_loads=self.check_loads)
        return res.model, res

    def build(self, placed: Sequence[Placement]) -> _Candidate:
        model, res = self._typed(self.work, placed)
        runnable, run_res = (model, res) if self.twin is None else self._typed(self.twin, self.runnable(placed))
        twins = (emulate_half(runnable, set(run_res.half_tensors)),) if run_res is not None else ()
        return _Candidate(model, runnable, twins, res.report if res is not None else None)


def _check_valid(qmodel: onnx.ModelProto, work: Callable[[], onnx.ModelProto]) -> None:
    """``work()``: the model Q/DQ went into, whose own verdict is asked only when ``qmodel`` fails."""
    # The structure alone: the checker checks structure, not values; the whole model would be
    # serialized once more for it, and refuses the absolute paths of weights left on disk.
    try:
        check_structure_only(qmodel, None)
    except onnx.checker.ValidationError as exc:
        if all(is_default_domain(o.domain) for o in qmodel.opset_import) and _passes_checker(work()):
            raise InternalError(f"Q/DQ insertion produced an invalid model: {str(exc).splitlines()[0]}") from exc


def _file_hash(path: Path) -> str:
    """The model file and its external-data files (the cache must notice new weights too)."""

    return model_sha256(load_model(path, load_weights=False, check=False))


def _finalize(
    placements: Sequence[Placement], scales: Mapping[str, float], absent: set[str]
) -> tuple[list[Placement], list[Skip]]:
    """Keep a node's Q/DQs only if every activation it needs got a scale (INT8 is all-or-nothing per layer)."""
    by_node: dict[tuple[str, str], list[Placement]] = {}
    for p in placements:
        by_node.setdefault((p.graph, p.node), []).append(p)
    placed: list[Placement] = []
    skips: list[Skip] = []
    for (graph, node), ps in by_node.items():
        missing = [p for p in ps if p.kind == "activation" and p.tensor not in scales]
        if missing:
            t = missing[0].tensor
            why = (f"{t!r} is not in the calibration model" if t in absent
                   else f"{t!r} carried no float data during calibration (branch never taken, or not float32)")
            skips.append(Skip(graph, node, ps[0].op_type, f"not quantized: {why}"))
            continue
        for p in ps:
            if p.kind == "activation":
                p = Placement(**{**p.__dict__, "scale": scales[p.tensor]})
            placed.append(p)
    return placed, skips
