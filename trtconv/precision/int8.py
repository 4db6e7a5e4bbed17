"""INT8 made explicit: calibrate on real data, insert Q/DQ, prove the accuracy on held-out data.

The library API behind ``trtconv quantize --precision int8``. It never prints: progress
goes to an optional callback, and everything the user should know (each Q/DQ placed or
skipped and why, every scale, the cache hit or miss, the accuracy against FP32) is in
the returned report.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import version_converter

from trtconv.errors import AccuracyError, DataError, InternalError, UnsupportedModelError
from trtconv.load.model import load_model, model_sha256
from trtconv.onnxutil.domains import default_opset, is_default_domain
from trtconv.precision.calib_cache import CacheInfo, cache_key, read_cache, write_cache
from trtconv.precision.calibrate import Calibrator, CalibSettings, Method, scale_from_threshold
from trtconv.precision.qdq import (
    SHAPE_ONLY,
    ModelIndex,
    Placement,
    Skip,
    expose_tensors,
    insert_qdq,
    plan_qdq,
)
from trtconv.reference.compare import OutputStats, Thresholds, compare_arrays, violations
from trtconv.reference.ort import run, session

log = logging.getLogger(__name__)

MIN_QDQ_OPSET = 13  # per-channel DequantizeLinear (axis) needs opset 13
DEFAULT_TRT_VERSION = "11.4"

# progress(stage, done, total): stage is "calibrate" or "accuracy"; total may be None
ProgressFn = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True)
class Int8Settings:
    """How to quantize. ``thresholds`` fail the run (AccuracyError, exit 7) when accuracy misses them."""

    method: Method = "entropy"
    percentile: float = 99.99
    exclude: tuple[str, ...] = ()  # fnmatch patterns over node names and op types
    residual_add: bool = True
    cache_path: Path | None = None
    use_cache: bool = True
    trt_version: str = DEFAULT_TRT_VERSION
    thresholds: Thresholds = field(default_factory=Thresholds)
    top1: bool | None = None  # None: for classifier-like outputs (softmax or [N, C])
    max_samples: int = 0  # 0 = every calibration sample


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

    @property
    def passed(self) -> bool:
        return not self.violations

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
        converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise UnsupportedModelError(
            f"cannot upgrade the model from opset {current} to {target} for INT8 Q/DQ: {str(exc).splitlines()[0]}",
            hint="re-export the model with opset >= 13",
        ) from exc
    return converted, (current, target)


def proto_sha256(model: onnx.ModelProto) -> str:
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _digest(samples: Any) -> str | None:
    fn = getattr(samples, "digest", None)
    return fn() if callable(fn) else None


def _length(samples: Any) -> int | None:
    source = getattr(samples, "source", None)
    if source is not None and getattr(source, "kind", None) == "loader":
        return None  # counting would run user code twice
    try:
        return len(samples)
    except TypeError:
        return None


def _with_origin(samples: Iterable[Mapping[str, np.ndarray]], what: str) -> Iterator[tuple[str, Mapping]]:
    """(where it came from, sample): file names from a SampleSet, indices otherwise."""
    fn = getattr(samples, "with_origin", None)
    if callable(fn):
        return fn()
    return ((f"{what} {i}", s) for i, s in enumerate(samples))


def _run_failure(origin: str, exc: Exception) -> DataError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DataError(f"{origin}: ONNX Runtime failed on this sample ({first[:300]})",
                     hint="check the sample's shapes and values against the model's inputs")


def _classifier_outputs(model: onnx.ModelProto) -> set[str]:

    index = ModelIndex.build(model)
    out = set()
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if index.producer_op(vi.name, through=SHAPE_ONLY) in ("Softmax", "LogSoftmax"):
            out.add(vi.name)
        elif len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value > 1:
            out.add(vi.name)
    return out


# ----------------------------------------------------------------------------- calibration


def collect_scales(
    model: onnx.ModelProto,
    tensors: Sequence[str],
    samples: Iterable[Mapping[str, np.ndarray]],
    settings: CalibSettings,
    *,
    max_samples: int = 0,
    progress: ProgressFn | None = None,
    total: int | None = None,
    guarded: set[str] | None = None,
) -> tuple[dict[str, float], int]:
    """Run ``model`` in ONNX Runtime once per sample, streaming the wanted tensors into histograms.

    Returns (scale per tensor that carried float data, number of runs); tensors whose entropy
    threshold the clip guard raised are added to ``guarded``.
    """

    inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    fed = [t for t in tensors if t in inputs]
    exposed, mapping = expose_tensors(model, [t for t in tensors if t not in inputs])
    sess = session(exposed, optimize=True)
    fetch = list(mapping)
    cal = Calibrator(settings)
    runs = 0
    if total is not None and max_samples:
        total = min(total, max_samples)
    for origin, sample in _with_origin(samples, "calibration sample"):
        if max_samples and runs >= max_samples:
            break
        try:
            values = sess.run(fetch, dict(sample)) if fetch else []
        except Exception as exc:
            raise _run_failure(origin, exc) from exc
        for name, val in zip(fetch, values):
            arr = np.asarray(val)
            if arr.dtype == np.float32 and arr.size:
                cal.update(mapping[name], arr)
        for t in fed:
            arr = np.asarray(sample[t])
            if arr.dtype == np.float32:
                cal.update(t, arr)
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


# ----------------------------------------------------------------------------- accuracy


class _Acc:
    """Per-output statistics accumulated over samples of possibly different shapes."""

    def __init__(self, name: str, top1: bool) -> None:
        self.name, self.top1 = name, top1
        self.shape: tuple[int, ...] | None = None
        self.max_abs = self.max_rel = 0.0
        self.sum_abs = 0.0
        self.n = 0
        self.dot = self.nr = self.ng = 0.0
        self.nonfinite = 0
        self.top_hits = 0.0
        self.top_rows = 0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        s = compare_arrays(self.name, ref, got, top1=self.top1)
        self.shape = self.shape or s.shape
        self.max_abs = max(self.max_abs, s.max_abs)
        self.max_rel = max(self.max_rel, s.max_rel)
        self.sum_abs += s.mean_abs * ref.size
        self.n += ref.size
        mask = np.isfinite(ref) & np.isfinite(got)
        r = np.where(mask, ref, 0).astype(np.float64).ravel()
        g = np.where(mask, got, 0).astype(np.float64).ravel()
        self.dot += float(r @ g)
        self.nr += float(r @ r)
        self.ng += float(g @ g)
        self.nonfinite += s.nonfinite
        if s.top1_agreement is not None:
            rows = ref.size // ref.shape[-1]
            self.top_hits += s.top1_agreement * rows
            self.top_rows += rows

    def stats(self) -> OutputStats:
        if self.nr == 0 and self.ng == 0:
            cos = 1.0
        elif self.nr == 0 or self.ng == 0:
            cos = 0.0
        else:
            cos = float(np.clip(self.dot / np.sqrt(self.nr * self.ng), -1.0, 1.0))
        return OutputStats(
            name=self.name, shape=self.shape or (), max_abs=self.max_abs,
            mean_abs=self.sum_abs / self.n if self.n else 0.0, max_rel=self.max_rel, cosine=cos,
            nonfinite=self.nonfinite, top1_agreement=self.top_hits / self.top_rows if self.top_rows else None,
        )


def accuracy_report(
    reference: onnx.ModelProto,
    candidate: onnx.ModelProto,
    samples: Iterable[Mapping[str, np.ndarray]],
    *,
    top1: bool | None = None,
    progress: ProgressFn | None = None,
    total: int | None = None,
) -> tuple[tuple[OutputStats, ...], int]:
    """Candidate against reference (both in ONNX Runtime) per output, over all ``samples``."""

    ref_sess, cand_sess = session(reference, optimize=True), session(candidate, optimize=True)
    outputs = [o.name for o in ref_sess.get_outputs()]
    classifiers = _classifier_outputs(reference) if top1 is None else (set(outputs) if top1 else set())
    accs = {o: _Acc(o, o in classifiers) for o in outputs}
    n = 0
    for origin, sample in _with_origin(samples, "accuracy sample"):
        try:
            ref = run(ref_sess, sample)
            got = run(cand_sess, sample, outputs)
        except Exception as exc:
            raise _run_failure(origin, exc) from exc
        for o in outputs:
            if ref[o].dtype.kind in "fc":
                accs[o].add(ref[o], got[o])
        n += 1
        if progress:
            progress("accuracy", n, total)
    return tuple(a.stats() for a in accs.values() if a.n), n


# ----------------------------------------------------------------------------- the API


def _passes_checker(model: onnx.ModelProto) -> bool:
    """The input's own verdict: Q/DQ insertion inherits what the input already breaks (unsorted nodes...)."""
    try:
        onnx.checker.check_model(model)
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
) -> Int8Result:
    """Calibrate ``model`` on ``calib_samples`` and return it with explicit INT8 Q/DQ.

    ``calibration_model``: an ONNX Runtime-runnable form of ``model`` with the same tensor
    names (e.g. plugin nodes replaced by ``DeformConv``); activations are measured on it and
    the scales carried over. ``eval_samples`` must be held out from calibration; the report's
    accuracy compares the INT8 model with ``model`` on them. Raises :class:`Int8AccuracyError`
    (exit 7) if that misses ``settings.thresholds``, DataError (exit 11) for bad samples.
    """
    work, upgrade = upgrade_opset(model)
    index = ModelIndex.build(work)
    plan = plan_qdq(work, exclude=settings.exclude, residual_add=settings.residual_add, index=index)
    needed = plan.activation_tensors()
    skips = list(plan.skips)

    cal_model = calibration_model if calibration_model is not None else work
    if calibration_model is not None:
        cal_index = ModelIndex.build(calibration_model)
        known = set(cal_index.producer) | {i.name for i in calibration_model.graph.input}
        absent = {t for t in needed if t not in known}
        needed = [t for t in needed if t in known]
    else:
        absent = set()

    calib = CalibSettings(method=settings.method, percentile=settings.percentile)
    model_hash = proto_sha256(model) if model_path is None else _file_hash(model_path)
    if calibration_model is not None:
        model_hash = hashlib.sha256((model_hash + proto_sha256(calibration_model)).encode()).hexdigest()
    data_hash = _digest(calib_samples)
    params = {"percentile": calib.percentile, "bins": calib.bins, "levels": calib.levels,
              "max_samples": settings.max_samples}
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
    t0 = time.perf_counter()
    if scales is None:
        scales, runs = collect_scales(cal_model, needed, calib_samples, calib, max_samples=settings.max_samples,
                                      progress=progress, total=_length(calib_samples), guarded=guarded)
        if cache_path and data_hash is not None and settings.use_cache:
            write_cache(cache_path, scales, key=key, method=settings.method, trt_version=settings.trt_version,
                        meta={"model_sha256": model_hash, "data_sha256": data_hash, "params": params})
    seconds = time.perf_counter() - t0
    cache = CacheInfo(str(cache_path) if cache_path else None, key, hit, reason)

    placed, more_skips = _finalize(plan.placements, scales, absent)
    skips += more_skips
    qmodel = insert_qdq(work, placed, scales)
    qmodel.ir_version = max(qmodel.ir_version, 4)  # IR 3 wants every initializer listed as an input; we add some
    try:
        onnx.checker.check_model(qmodel)
    except onnx.checker.ValidationError as exc:
        if all(is_default_domain(o.domain) for o in qmodel.opset_import) and _passes_checker(work):
            raise InternalError(f"Q/DQ insertion produced an invalid model: {str(exc).splitlines()[0]}") from exc

    accuracy: tuple[OutputStats, ...] = ()
    n_eval = 0
    if eval_samples is not None:
        ref = calibration_model if calibration_model is not None else model
        cand = qmodel if calibration_model is None else _carry_over(qmodel, calibration_model, placed, scales)
        accuracy, n_eval = accuracy_report(ref, cand, eval_samples, top1=settings.top1, progress=progress,
                                           total=_length(eval_samples))
    bad = tuple(violations(list(accuracy), settings.thresholds)) if accuracy else ()
    used_scales = {p.tensor: scales[p.tensor] for p in placed if p.kind == "activation"}
    report = Int8Report(
        method=settings.method, placed=tuple(placed), skipped=tuple(skips), scales=used_scales, cache=cache,
        calibration_runs=runs, calibration_seconds=seconds, opset_upgrade=upgrade, accuracy=accuracy,
        accuracy_samples=n_eval, violations=bad, clip_guarded=tuple(sorted(guarded & set(used_scales))),
    )
    result = Int8Result(qmodel, report)
    if bad:
        raise Int8AccuracyError(
            f"INT8 accuracy below the thresholds: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
            result,
            hint="calibrate on more representative data, try --calib-method percentile, or --exclude sensitive layers",
        )
    return result


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


def _carry_over(
    qmodel: onnx.ModelProto, calibration_model: onnx.ModelProto, placed: Sequence[Placement], scales: Mapping[str, float]
) -> onnx.ModelProto:
    """The calibration model with the same Q/DQs: how to measure accuracy when the real model has plugins."""
    work, _ = upgrade_opset(calibration_model)
    names = {n.name for _, g in ModelIndex.build(work).graphs for n in g.node}
    return insert_qdq(work, [p for p in placed if p.node in names], scales)
