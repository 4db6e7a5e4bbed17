"""Activation calibrators: entropy (TensorRT's KL-divergence search), percentile and min-max.

Statistics stream: each tensor keeps one fixed-size histogram of ``|x|`` that grows
by exact bin merging when a later sample exceeds its range, so memory stays bounded
no matter how many samples there are and no activation is kept past its sample.

The entropy search follows TensorRT's published algorithm (Migacz, "8-bit Inference
with TensorRT", GTC 2017): 2048 bins of ``|x|``, candidate thresholds from bin 128 on,
the reference distribution with outliers folded into its last bin, the candidate
quantized to 128 levels and expanded back with empty bins kept empty; the threshold
minimises KL(P||Q). Details (the zero-bin spike flattened, candidates up to 2048, level
boundaries) follow NVIDIA's own Python mirror of it in pytorch-quantization. ONNX Runtime's default of 128 bins leaves a single candidate, so its
"entropy" result is then just min-max; we always search the 2048-bin histogram.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Method = Literal["entropy", "percentile", "minmax", "mse", "auto"]
METHODS: tuple[Method, ...] = ("entropy", "percentile", "minmax", "mse", "auto")
# "auto": every candidate below from one pass of histograms; the INT8 stage keeps the one whose
# model agrees best with FP32 on the held-out samples. (method, percentile) pairs.
AUTO_CANDIDATES: tuple[tuple[Method, float | None], ...] = (
    ("entropy", None), ("percentile", 99.9), ("percentile", 99.99), ("percentile", 99.999), ("minmax", None),
    ("mse", None))

ENTROPY_BINS = 2048
QUANT_LEVELS = 128  # |x| maps onto 128 positive int8 levels (0..127)
FINE_FACTOR = 8  # the streaming histogram keeps 8 fine bins per entropy bin
INT8_MAX = 127.0


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P||Q) of two unnormalised histograms; ``inf`` where Q is empty but P is not."""
    p = p / p.sum()
    q = q / q.sum()
    m = p > 0
    if np.any(q[m] == 0):
        return float("inf")
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def entropy_search(hist: np.ndarray, *, levels: int = QUANT_LEVELS, start: int | None = None) -> tuple[int, np.ndarray]:
    """The candidate bin count ``i`` minimising KL(P||Q), and every candidate's divergence.

    As NVIDIA's TensorRT-matching implementation (pytorch-quantization's histogram
    calibrator) does: the zero bin's spike (ReLU outputs) is flattened to its neighbour's
    count; candidates are ``i = start .. len(hist)`` (TensorRT: 128 .. 2048); P is the first
    ``i`` bins with the outliers folded into the last one; Q maps bin ``j`` to level
    ``floor(j * levels / i)``, spreading each level's count evenly over its non-empty bins
    (empty bins stay empty); an empty Q bin under a non-empty P bin makes KL infinite. Ties
    go to the larger ``i``. ``divs[i]`` is ``inf`` outside the candidate range.

    Because Q is constant on each level's non-empty bins, the divergence decomposes into
    prefix sums of ``h log h`` and per-level sums, so all candidates cost O(levels) each
    instead of O(bins): the whole search is a few array operations.
    """
    h = np.asarray(hist, dtype=np.float64).copy()
    n = h.size
    if n > 1:
        h[0] = h[1]
    start = levels if start is None else start
    divs = np.full(n + 1, np.inf)
    if start > n:
        return n, divs
    with np.errstate(divide="ignore", invalid="ignore"):
        hlogh = np.where(h > 0, h * np.log(np.where(h > 0, h, 1.0)), 0.0)
    a = np.concatenate([[0.0], np.cumsum(hlogh)])  # sum of h log h over bins < k
    cum = np.concatenate([[0.0], np.cumsum(h)])
    nzc = np.concatenate([[0.0], np.cumsum(h != 0)])
    total = cum[-1]
    if total <= 0:
        return n, divs
    i = np.arange(start, n + 1)
    g = np.arange(levels + 1)
    bounds = (g[None, :] * i[:, None] + levels - 1) // levels  # level k covers bins [bounds[k], bounds[k+1])
    sums = cum[bounds[:, 1:]] - cum[bounds[:, :-1]]
    counts = nzc[bounds[:, 1:]] - nzc[bounds[:, :-1]]
    with np.errstate(divide="ignore", invalid="ignore"):
        level_term = np.where(counts > 0, sums * np.log(sums / np.where(counts > 0, counts, 1.0)), 0.0)
        outliers = total - cum[i]
        last_h = h[i - 1]
        last_q = sums[:, -1] / np.where(counts[:, -1] > 0, counts[:, -1], 1.0)
        cross = level_term.sum(axis=1) + np.where((outliers > 0) & (last_h > 0), outliers * np.log(last_q), 0.0)
        p_last = last_h + outliers
        self_term = a[i - 1] + np.where(p_last > 0, p_last * np.log(np.where(p_last > 0, p_last, 1.0)), 0.0)
        q_total = cum[i]
        kl = (self_term - cross) / total - np.log(total) + np.log(np.where(q_total > 0, q_total, 1.0))
    bad = ((outliers > 0) & (last_h == 0)) | (q_total <= 0)
    divs[i] = np.where(bad, np.inf, np.maximum(kl, 0.0))
    if not np.isfinite(divs).any():
        return n, divs
    best = int(np.flatnonzero(divs == divs.min())[-1])
    return best, divs


def entropy_threshold(hist: np.ndarray, amax: float, *, levels: int = QUANT_LEVELS, start: int | None = None) -> float:
    """|x| threshold from a histogram over ``[0, amax]``: the upper edge of the best candidate's last bin."""
    if amax <= 0 or float(np.sum(hist)) == 0:
        return 0.0
    width = amax / len(hist)
    best, _ = entropy_search(hist, levels=levels, start=start)
    return min(amax, best * width)


def mse_threshold(hist: np.ndarray, amax: float, *, levels: int = QUANT_LEVELS) -> float:
    """|x| threshold over ``[0, amax]`` minimising the expected squared INT8 error of the histogram's values.

    For a candidate threshold ``t`` (every bin edge), values below half a step round to 0
    (error ``x²``: ReLU zeros cost nothing), the other values below ``t`` round to a grid of
    step ``t / 127`` (error variance step²/12), and values above it clip to ``t`` (error
    ``(|x| - t)²``), each value at its bin centre; prefix sums make every candidate O(1).
    """
    h = np.asarray(hist, dtype=np.float64)
    if amax <= 0 or h.sum() == 0:
        return 0.0
    n = h.size
    width = amax / n
    centres = (np.arange(n) + 0.5) * width
    c0 = np.concatenate([[0.0], np.cumsum(h)])  # sums over bins < k
    c1 = np.concatenate([[0.0], np.cumsum(h * centres)])
    c2 = np.concatenate([[0.0], np.cumsum(h * centres**2)])
    i = np.arange(1, n + 1)
    t = i * width
    step = t / (levels - 1)
    small = np.minimum(np.ceil(step / 2 / width - 0.5).astype(np.int64), i)  # bins whose centre < step / 2
    rounded = (c0[i] - c0[small]) * step**2 / 12.0 + c2[small]
    clipped = (c2[n] - c2[i]) - 2 * t * (c1[n] - c1[i]) + t**2 * (c0[n] - c0[i])
    err = rounded + np.maximum(clipped, 0.0)
    return float(min(amax, t[int(np.argmin(err))]))


class AbsHistogram:
    """Streaming histogram of ``|x|`` over ``[0, range]`` with a fixed number of bins.

    When a value exceeds the range, the range doubles (as often as needed) and adjacent
    bins merge exactly, so no count is ever smeared.
    """

    def __init__(self, bins: int = ENTROPY_BINS * FINE_FACTOR) -> None:
        self.bins = bins
        self.range = 0.0
        self.counts = np.zeros(bins, dtype=np.float64)
        self.amax = 0.0
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        a = np.abs(np.asarray(x, dtype=np.float32).ravel())
        if a.size == 0:
            return
        if not np.isfinite(a).all():
            a = a[np.isfinite(a)]
            if a.size == 0:
                return
        m = float(a.max())
        self.count += a.size
        self.amax = max(self.amax, m)
        if self.range == 0.0:
            if m == 0.0:
                self.counts[0] += a.size
                return
            self.range = m
        elif m > self.range:
            factor = 2 ** math.ceil(math.log2(m / self.range))
            while factor > 1 and self.range * factor < m:  # float rounding
                factor *= 2
            if factor >= self.bins:
                total = self.counts.sum()
                self.counts[:] = 0
                self.counts[0] = total
            else:
                merged = self.counts.reshape(-1, factor).sum(axis=1)
                self.counts[:] = 0
                self.counts[: merged.size] = merged
            self.range *= factor
        idx = (a * np.float32(self.bins / self.range)).astype(np.int64)
        np.minimum(idx, self.bins - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.bins)

    def over_amax(self, bins: int = ENTROPY_BINS) -> np.ndarray:
        """The histogram re-expressed as ``bins`` equal bins over ``[0, amax]``.

        Exact when the range never grew past the first sample's maximum; otherwise the
        fine bins are split by linear interpolation of the cumulative count.
        """
        if self.amax == 0.0:
            out = np.zeros(bins)
            out[0] = self.counts.sum()
            return out
        if self.range == self.amax and self.bins % bins == 0:
            return self.counts.reshape(bins, -1).sum(axis=1)
        cum = np.concatenate([[0.0], np.cumsum(self.counts)])
        fine_edges = np.linspace(0.0, self.range, self.bins + 1)
        coarse_edges = np.linspace(0.0, self.amax, bins + 1)
        return np.diff(np.interp(coarse_edges, fine_edges, cum))

    def percentile(self, pct: float) -> float:
        """The |x| value below which ``pct`` percent of the values fall (upper edge of that bin)."""
        total = self.counts.sum()
        if total == 0 or self.amax == 0.0:
            return 0.0
        cum = np.cumsum(self.counts)
        idx = int(np.searchsorted(cum, total * pct / 100.0, side="left"))
        return min(self.amax, (idx + 1) * self.range / self.bins)

    @property
    def nbytes(self) -> int:
        return self.counts.nbytes


@dataclass(frozen=True)
class CalibSettings:
    method: Method = "entropy"
    percentile: float = 99.99
    bins: int = ENTROPY_BINS
    levels: int = QUANT_LEVELS
    # entropy only: never clip more than this fraction of a tensor's values (None: TensorRT's
    # search unguarded). KL happily clips a small second mode (10% of values far out), which
    # can wreck a network; the guard raises such thresholds to the (1 - max_clip) quantile.
    max_clip: float | None = 0.001


class Calibrator:
    """Per-tensor running statistics; feed arrays with :meth:`update`, read |x| thresholds at the end."""

    def __init__(self, settings: CalibSettings) -> None:
        self.settings = settings
        self._hist: dict[str, AbsHistogram] = {}
        self._amax: dict[str, float] = {}
        self.guarded: set[str] = set()  # tensors whose entropy threshold the clip guard raised

    def update(self, name: str, x: np.ndarray) -> None:
        if self.settings.method == "minmax":
            a = np.asarray(x)
            if a.size == 0:
                return
            a = np.abs(a[np.isfinite(a)]) if not np.isfinite(a).all() else np.abs(a)
            if a.size:
                self._amax[name] = max(self._amax.get(name, 0.0), float(a.max()))
            return
        h = self._hist.get(name)
        if h is None:
            h = self._hist[name] = AbsHistogram(self.settings.bins * FINE_FACTOR)
        h.update(x)
        if h.count:
            self._amax[name] = h.amax

    def seen(self) -> set[str]:
        return set(self._amax)

    def threshold(self, name: str, method: Method | None = None, percentile: float | None = None) -> float:
        """``name``'s |x| threshold by ``method`` (default: the settings'; any method but minmax needs
        the histograms, which every method but minmax keeps)."""
        s = self.settings
        method = method or s.method
        if method == "minmax":
            return self._amax[name]
        h = self._hist[name]
        if method == "percentile":
            return h.percentile(s.percentile if percentile is None else percentile)
        if method == "mse":
            return mse_threshold(h.over_amax(s.bins), h.amax, levels=s.levels)
        th = entropy_threshold(h.over_amax(s.bins), h.amax, levels=s.levels)
        if s.max_clip is not None:
            floor = h.percentile(100.0 * (1.0 - s.max_clip))
            if floor > th:
                self.guarded.add(name)
                th = floor
        return th

    def thresholds(self, method: Method | None = None, percentile: float | None = None) -> dict[str, float]:
        return {n: self.threshold(n, method, percentile) for n in sorted(self._amax)}

    def amax(self) -> dict[str, float]:
        return dict(self._amax)

    @property
    def nbytes(self) -> int:
        return sum(h.nbytes for h in self._hist.values())


def scale_from_threshold(threshold: float) -> float:
    """Symmetric INT8 scale; a tensor that is all zeros gets scale 1 (it quantizes to 0 either way)."""
    return float(np.float32(threshold / INT8_MAX)) if threshold > 0 else 1.0
