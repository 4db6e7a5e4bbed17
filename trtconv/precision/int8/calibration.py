"""Scales for the tensors Q/DQ need: from the calibration cache when its key matches, else
measured on the calibration samples (one ONNX Runtime session, one sample in memory at a time).

The key covers the model (file and external data, or the proto; plus the calibration twin),
the data set's content hash, the method and its parameters.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtconv.errors import DataError, InternalError
from trtconv.load import (
    copy_lazy,
    inline_bytes,
    is_lazy,
    is_stripped,
    load_model,
    model_sha256,
    structure_only,
)
from trtconv.precision.expose import session_exposing
from trtconv.precision.int8.accuracy import run_failure, with_origin
from trtconv.precision.int8.calib_cache import CacheInfo, cache_key, read_cache, write_cache
from trtconv.precision.int8.calibrators import (
    AUTO_CANDIDATES,
    Calibrator,
    CalibSettings,
    scale_from_threshold,
)
from trtconv.precision.int8.parameters import Int8Settings, ProgressFn
from trtconv.precision.int8.prepare import PreparedModels
from trtconv.precision.peaks import activation_peaks, float_tensors, update_peak
from trtconv.samples import sample_count


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


def _file_hash(path: Path) -> str:
    """The model file and its external-data files (the cache must notice new weights too)."""

    return model_sha256(load_model(path, load_weights=False, check=False))


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
    """``model`` with ``tensors`` (and with ``peaks``, every float tensor) exposed, graph optimizations on; the memory
    arena kept (alone, it runs every calibration sample and is dropped: ``reference.ort.session``)."""
    inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    observed = [t for t in dict.fromkeys([*tensors, *(float_tensors(model) if peaks else ())]) if t not in inputs]
    sess, mapping = session_exposing(model, observed, optimize=True, arena=True)
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
    candidates: dict[str, dict[str, float]] | None = None,
) -> tuple[dict[str, float], int]:
    """Run the session once per sample, streaming the wanted tensors into histograms.

    Returns (scale per tensor that carried float data, number of runs); tensors whose entropy
    threshold the clip guard raised are added to ``guarded``. ``peaks`` (the session must expose
    every float tensor): filled in the same runs with every float tensor's largest magnitude
    (the FP16 remainder's activation rule), instead of a second pass over the samples.
    ``candidates``: filled with every ``AUTO_CANDIDATES`` method's scales, from the same histograms.
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
    if candidates is not None:
        for method, pct in AUTO_CANDIDATES:
            candidates[candidate_label(method, pct)] = {
                t: scale_from_threshold(th) for t, th in cal.thresholds(method, pct).items()}
    if guarded is not None:
        guarded.update(cal.guarded)
    return scales, runs


def candidate_label(method: str, percentile: float | None) -> str:
    """"entropy", "percentile-99.99", ...: how the report names a calibration candidate."""
    return method if percentile is None else f"{method}-{percentile:g}"




@dataclass(frozen=True)
class _Keyed:
    """The cache's key and what went into it."""

    key: str
    model_hash: str
    data_hash: str | None
    params: dict[str, Any]


@dataclass(frozen=True)
class Calibration:
    """What calibration gave: a scale per tensor, where it came from, and the FP16 remainder's peaks."""

    scales: dict[str, float]
    cache: CacheInfo
    runs: int  # ONNX Runtime runs spent calibrating: 0 when the cache was used
    seconds: float
    guarded: frozenset[str]  # entropy thresholds the clip guard raised (this run only)
    peaks: dict[str, float] | None  # every float tensor's largest magnitude (FP16 remainder), else None
    candidates: dict[str, dict[str, float]] = field(default_factory=dict)  # method "auto": scales per candidate
    keyed: _Keyed | None = None  # the cache key (to save the chosen candidate under)


def _cache_key(model: onnx.ModelProto, calibration_model: onnx.ModelProto | None, model_path: Path | None,
               samples: Any, settings: Int8Settings, calib: CalibSettings, folded: bool) -> _Keyed:
    model_hash = proto_sha256(model) if model_path is None else _file_hash(model_path)
    if calibration_model is not None:
        model_hash = hashlib.sha256((model_hash + proto_sha256(calibration_model)).encode()).hexdigest()
    data_hash = _digest(samples)
    params = {"percentile": calib.percentile, "bins": calib.bins, "levels": calib.levels,
              "max_samples": settings.max_samples, "batchnorm_folded": folded}
    if settings.method == "auto" and not settings.auto_smoothing:  # a kept bias correction was measured on the
        params["smoothing"] = False  # smoothed model: a run without smoothing keeps its own cache (default: same key)
    return _Keyed(cache_key(model_hash, data_hash or "", settings.method, params), model_hash, data_hash, params)


def _from_cache(settings: Int8Settings, keyed: _Keyed, needed: Sequence[str]) -> tuple[dict[str, float] | None, str]:
    """(scales, why) from the cache file when it is usable and its key matches; (None, why not) else."""
    cache_path = Path(settings.cache_path) if settings.cache_path else None
    if cache_path is None:
        return None, "no cache file given"
    if not settings.use_cache:
        return None, "cache disabled"
    if keyed.data_hash is None:
        return None, "samples have no content hash; cannot key a cache"
    return read_cache(cache_path, keyed.key, set(needed))


def calibrate(prepared: PreparedModels, needed: Sequence[str], samples: Iterable[Mapping[str, np.ndarray]],
              settings: Int8Settings, *, model_path: Path | None, progress: ProgressFn | None) -> Calibration:
    """Scales for ``needed`` (cache, else the samples), and the FP16 remainder's activation peaks.

    While the samples run, the prepared models go (the session holds what it needs).
    """
    calib = CalibSettings(method=settings.method, percentile=settings.percentile)
    keyed = _cache_key(prepared.model, prepared.twin, model_path, samples, settings, calib, bool(prepared.folded))
    scales, reason = _from_cache(settings, keyed, needed)
    hit = scales is not None
    cache_path = Path(settings.cache_path) if settings.cache_path else None
    want_peaks = settings.remainder == "fp16" and settings.fp16.max_activation is not None
    peaks: dict[str, float] | None = {} if want_peaks and scales is None else None
    guarded: set[str] = set()
    candidates: dict[str, dict[str, float]] = {}
    runs = 0
    t0 = time.perf_counter()
    if scales is None:
        run = calibration_session(prepared.get()[1], needed, peaks=peaks is not None)
        prepared.release()
        scales, runs = collect_scales(run, samples, calib, max_samples=settings.max_samples, progress=progress,
                                      total=sample_count(samples), guarded=guarded, peaks=peaks,
                                      candidates=candidates if settings.method == "auto" else None)
        del run
        if settings.method != "auto":  # auto: the chosen candidate's scales are saved once chosen
            save_scales(cache_path, scales, keyed, settings)
    seconds = time.perf_counter() - t0
    if want_peaks and peaks is None:  # a cache hit skipped the calibration pass that measures them
        if progress:
            progress("peaks", 0, None)
        peaks, _ = activation_peaks(prepared.get()[1], samples,
                                    progress=lambda k: progress and progress("peaks", k, None))
    cache = CacheInfo(str(cache_path) if cache_path else None, keyed.key, hit, reason)
    return Calibration(scales, cache, runs, seconds, frozenset(guarded), peaks, candidates, keyed)


def save_scales(cache_path: Path | None, scales: dict[str, float], keyed: _Keyed, settings: Int8Settings,
                extra: Mapping[str, Any] | None = None) -> None:
    """Write the calibration cache and its key sidecar (when a cache is asked for and can be keyed);
    ``extra``: more for the sidecar (the per-tensor choice: which tensor took which method)."""
    if cache_path and keyed.data_hash is not None and settings.use_cache:
        write_cache(cache_path, scales, key=keyed.key, method=settings.method, trt_version=settings.trt_version,
                    meta={"model_sha256": keyed.model_hash, "data_sha256": keyed.data_hash, "params": keyed.params,
                          **(extra or {})})


def keep_candidate(cal: Calibration, label: str, settings: Int8Settings,
                   extra: Mapping[str, Any] | None = None) -> Calibration:
    """``cal`` with the chosen candidate's scales, which the cache then holds (``extra``: in its sidecar)."""
    scales = dict(cal.candidates[label])
    if cal.keyed is not None:
        save_scales(Path(settings.cache_path) if settings.cache_path else None, scales, cal.keyed, settings,
                    {"chosen_method": label, **(extra or {})})
    return replace(cal, scales=scales)
