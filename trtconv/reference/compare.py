"""Output comparison: the numbers behind every "proven numerically" claim.

One function serves rewrite proofs, FP16/INT8 accuracy reports and engine
verification, so they all report the same statistics the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np


@dataclass(frozen=True)
class OutputStats:
    name: str
    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    nonfinite: int  # NaN/Inf in the candidate where the reference is finite
    top1_agreement: float | None = None  # for classifier-like outputs: the argmax along the classes' axis
    per_sample_cosine: tuple[float, ...] = ()  # pooled over samples: each sample's own cosine (reports plot it)
    # what ``cosine`` measures: "cosine", or ONE_VALUE_MEASURE for an output of one value per sample (its error
    # against the output's RMS, on the cosine's scale: :func:`one_value_cosines`)
    measure: str = "cosine"

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        if self.per_sample_cosine:
            d["per_sample_cosine"] = [round(c, 7) for c in self.per_sample_cosine]
        else:
            del d["per_sample_cosine"]
        return d


LIMITS = ("max_abs", "max_rel", "min_cosine", "min_top1")


@dataclass(frozen=True)
class Thresholds:
    """Pass/fail limits; None means "not checked".

    ``per_output`` overrides limits for named outputs (``(("scores", Thresholds(min_cosine=0.995)),)``:
    only the limits the override sets replace the global ones); ``only`` gates just the named
    outputs (the others are still measured and reported).
    """

    max_abs: float | None = None
    max_rel: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    allow_nonfinite: bool = False
    per_output: tuple[tuple[str, Thresholds], ...] = ()
    only: tuple[str, ...] | None = None

    def for_output(self, name: str) -> Thresholds | None:
        """The limits that apply to output ``name`` (None: that output is not gated)."""
        if self.only is not None and name not in self.only:
            return None
        base = replace(self, per_output=(), only=None)
        for out, over in self.per_output:
            if out == name:
                base = replace(base, **{k: getattr(over, k) for k in LIMITS if getattr(over, k) is not None})
        return base

    def outputs_named(self) -> set[str]:
        """Every output name the limits mention (to check against the model's outputs)."""
        return {n for n, _ in self.per_output} | set(self.only or ())

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {k: getattr(self, k) for k in LIMITS if getattr(self, k) is not None}
        if self.allow_nonfinite:
            d["allow_nonfinite"] = True
        if self.per_output:
            d["per_output"] = {n: t.to_json() for n, t in self.per_output}
        if self.only is not None:
            d["only"] = list(self.only)
        return d


# Per precision: how close a model must stay to FP32 by default (``verify`` for engines, and the
# quantize gate for the FP16/INT8 ONNX): cosine similarity per output.
DEFAULT_THRESHOLDS: dict[str, Thresholds] = {
    "fp32": Thresholds(min_cosine=0.9999),
    "fp16": Thresholds(min_cosine=0.999),
    "int8": Thresholds(min_cosine=0.99),
}


def thresholds_with(base: Thresholds, overrides: Mapping[str, Sequence[tuple[str | None, float]]], *,
                    allow_nonfinite: bool = False, only: Sequence[str] = ()) -> Thresholds:
    """``base`` with user limits applied: ``{"min_cosine": [(None, 0.98), ("scores", 0.995)]}``.

    A ``None`` output name sets the global limit; a name adds a per-output override.
    """
    glob: dict[str, float] = {}
    per: dict[str, dict[str, float]] = {}
    for limit, items in overrides.items():
        if limit not in LIMITS:
            raise ValueError(f"unknown limit {limit!r}")
        for name, value in items:
            if name is None:
                glob[limit] = value
            else:
                per.setdefault(name, {})[limit] = value
    out = replace(base, **glob, allow_nonfinite=allow_nonfinite or base.allow_nonfinite)
    if per:
        out = replace(out, per_output=out.per_output + tuple((n, Thresholds(**v)) for n, v in per.items()))
    if only:
        out = replace(out, only=tuple(only))
    return out


def parse_limit(text: str) -> tuple[str | None, float]:
    """``"0.995"`` -> (None, 0.995); ``"scores=0.995"`` -> ("scores", 0.995). ValueError if malformed."""
    name, eq, value = text.rpartition("=")
    return (name.strip() if eq else None) or None, float(value)


ONE_VALUE_MEASURE = "error-vs-rms"  # OutputStats.measure of an output with one value per sample


def one_value(sizes: Iterable[int]) -> bool:
    """Whether an output holds at most one value in every sample (and one in some): there a cosine is 1 whenever
    the signs agree (a cosine is blind to scale, and one value has nothing else), so it measures nothing. From
    two values on it sees every error but a change of scale, the same blind spot it has on any output."""
    return max(sizes, default=0) == 1


def one_value_cosines(errors: Sequence[float], values: Sequence[float]) -> tuple[float, tuple[float, ...]]:
    """An output of one value per sample: (pooled, per sample) ``1 / sqrt(1 + e^2)``, ``e`` the error (candidate
    minus reference, ``errors``) over the RMS of the reference's values over all the samples (``values``; NaN:
    not finite, left out). That is the cosine the error would give at right angles to a vector of the RMS's
    norm: on the cosine's scale, so the same limits and claim apply (0.99: an error up to 14.2 % of the RMS,
    0.999: 4.5 %). Pooled: the RMS error over the RMS (docs/precision.md, "One value per sample")."""
    finite = [v * v for v in values if v == v]
    mean2 = sum(finite) / len(finite) if finite else 0.0
    per = tuple(_error_cosine(e * e, mean2) for e in errors)
    pooled = _error_cosine(sum(e * e for e in errors) / len(finite), mean2) if finite else 1.0
    return pooled, per


def _error_cosine(err2: float, mean2: float) -> float:
    if not err2 == err2:
        return float("nan")
    if err2 == 0.0:
        return 1.0
    if mean2 <= 0.0:
        return 0.0  # an error where the reference is zero throughout
    return float(1.0 / np.sqrt(1.0 + err2 / mean2))


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """The sum of ``a * b`` over two vectors, without BLAS: OpenBLAS spreads a long dot product over its
    threads, and on a busy machine waiting for them costs many times the arithmetic (the INT8 sensitivity pass
    on PP-OCR cls, 6,000 dot products of about 8,000 values: 19 s through BLAS, 0.3 s this way)."""
    return float(np.einsum("i,i->", a, b))


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    a64 = a.astype(np.float64).ravel()
    b64 = b.astype(np.float64).ravel()
    return _cosine(a64, b64, dot(a64, b64), dot(a64, a64), dot(b64, b64))


def _cosine(a64: np.ndarray, b64: np.ndarray, ab: float, aa: float, bb: float, equal: bool | None = None) -> float:
    """:func:`cosine_similarity` from the dot products already taken (``equal``: whether ``a64 == b64``, when
    known)."""
    na, nb = np.sqrt(aa), np.sqrt(bb)
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    if np.array_equal(a64, b64) if equal is None else equal:
        return 1.0  # exact, not 1 - rounding
    return float(np.clip(ab / (na * nb), -1.0, 1.0))


def compare_arrays(name: str, ref: np.ndarray, got: np.ndarray, *, top1: bool = False, axis: int = -1) -> OutputStats:
    """Statistics of ``got`` against ``ref`` (computed in float64); ``top1``: with the agreement of the argmax
    along ``axis`` (the classes')."""
    return _compared(name, ref, got, top1, axis)[0]


def _compared(name: str, ref: np.ndarray, got: np.ndarray, top1: bool, axis: int = -1
              ) -> tuple[OutputStats, tuple[float, float, float]]:
    """:func:`compare_arrays`, and the dot products (ref·got, ref·ref, got·got over the values finite in both,
    in float64) that pooling adds up: taken once for both."""
    if ref.shape != got.shape:
        raise ValueError(f"output {name!r}: shape {got.shape} differs from reference {ref.shape}")
    ints = ref.dtype.kind in "biu" and got.dtype.kind in "biu"  # equal as integers is not equal in float64
    if ints:
        diff = np.abs(ref.astype(np.int64) - got.astype(np.int64)).astype(np.float64)
        r64 = ref.astype(np.float64)
        g64 = got.astype(np.float64)
    else:
        r64 = ref.astype(np.float64)
        g64 = got.astype(np.float64)
        diff = np.subtract(r64, g64, out=np.empty_like(r64))  # ``out``: an array even for a 0-d output (a scalar)
        np.abs(diff, out=diff)
    if np.isfinite(r64.sum()) and np.isfinite(g64.sum()):  # every value finite (a sum of float64 is then finite
        # unless the values are float64 near its limit): the masks below would select everything, so skip making them
        bad = 0
        d, denom, rm, gm = diff.ravel(), np.abs(r64).ravel(), r64.ravel(), g64.ravel()
    else:
        finite_ref = np.isfinite(r64)
        bad = int(np.count_nonzero(finite_ref & ~np.isfinite(g64)))
        mask = finite_ref & np.isfinite(g64)
        d = diff[mask]
        denom = np.abs(r64[mask])
        rm, gm = np.where(mask, r64, 0).ravel(), np.where(mask, g64, 0).ravel()
    # Relative error only where the reference is not tiny: elsewhere it is noise.
    big = denom > 1e-6 * (float(denom.max()) if denom.size else 0.0)
    rel = np.divide(d, np.maximum(denom, 1e-12, out=denom), out=denom) if d.size else d  # ``denom`` is not read again
    top = None
    if top1 and -ref.ndim <= axis < ref.ndim and ref.shape[axis] > 1:  # ``axis``: the classes'
        top = float(np.mean(np.argmax(r64, axis=axis) == np.argmax(g64, axis=axis)))
    dots = dot(rm, gm), dot(rm, rm), dot(gm, gm)
    max_abs = float(d.max()) if d.size else 0.0
    return OutputStats(
        name=name,
        shape=tuple(int(s) for s in ref.shape),
        max_abs=max_abs,
        mean_abs=float(d.mean()) if d.size else 0.0,
        # the largest of the values ``big`` selects (every one >= 0), without copying them out
        max_rel=float(np.max(rel, where=big, initial=0.0)) if d.size and big.any() else 0.0,
        cosine=_cosine(rm, gm, *dots, equal=None if ints else max_abs == 0.0),  # masked out: 0 on both sides
        nonfinite=bad,
        top1_agreement=top,
    ), dots


def pooled_cosine(rg: float, rr: float, gg: float) -> float:
    """The cosine from summed dot products (ref·got, ref·ref, got·got, as :meth:`PooledStats.add` returns them for
    one sample and sums them over many): 1 when both sides are zero, 0 when one is."""
    if rr == 0 and gg == 0:
        return 1.0
    if rr == 0 or gg == 0:
        return 0.0
    return float(np.clip(rg / np.sqrt(rr * gg), -1.0, 1.0))


class PooledStats:
    """Per-output statistics accumulated over samples of possibly different shapes."""

    def __init__(self, name: str, top1: bool, by_error: bool = False, axis: int = -1) -> None:
        """``by_error``: an output of one value per sample (:func:`one_value`) is measured by its error against
        its RMS (:func:`one_value_cosines`), not by the cosine (the gates and ``verify`` do)."""
        self.name, self.top1, self.by_error, self.axis = name, top1, by_error, axis  # axis: the classes' (top-1)
        self.sizes: list[int] = []  # each sample's count of values
        self.errors: list[float] = []  # of a sample with at most one value: its error (0 when it has none)
        self.values: list[float] = []  # ... and its reference value (NaN where not finite); kept while all are small
        self.shape: tuple[int, ...] | None = None
        self.max_abs = self.max_rel = 0.0
        self.sum_abs = 0.0
        self.n = 0
        self.dot = self.nr = self.ng = 0.0
        self.nonfinite = 0
        self.top_hits = 0.0
        self.top_rows = 0
        self.cosines: list[float] = []

    def add(self, ref: np.ndarray, got: np.ndarray) -> tuple[float, float, float]:
        """Add one sample; its dot products (ref·got, ref·ref, got·got over the values finite in both)."""
        s, (rg, rr, gg) = _compared(self.name, ref, got, self.top1, self.axis)
        self.shape = self.shape or s.shape
        self.max_abs = max(self.max_abs, s.max_abs)
        self.max_rel = max(self.max_rel, s.max_rel)
        self.sum_abs += s.mean_abs * ref.size
        self.n += ref.size
        self.dot += rg
        self.nr += rr
        self.ng += gg
        self.nonfinite += s.nonfinite
        self.cosines.append(s.cosine)
        self.sizes.append(int(ref.size))
        if self.by_error and ref.size <= 1:  # one value: its max abs error is its error
            self.errors.append(s.max_abs)
            if ref.size:
                v = float(np.asarray(ref, np.float64).ravel()[0])
                self.values.append(v if np.isfinite(v) else float("nan"))
        if s.top1_agreement is not None:
            rows = ref.size // ref.shape[self.axis]
            self.top_hits += s.top1_agreement * rows
            self.top_rows += rows
        return rg, rr, gg

    def merge(self, other: PooledStats) -> None:
        """Fold in ``other``'s statistics; for one sample's, exactly what adding that sample here gives (the
        accuracy check measures samples out of order and folds them in order: the same sums, bit for bit)."""
        self.shape = self.shape or other.shape
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.sum_abs += other.sum_abs
        self.n += other.n
        self.dot += other.dot
        self.nr += other.nr
        self.ng += other.ng
        self.nonfinite += other.nonfinite
        self.cosines.extend(other.cosines)
        self.sizes.extend(other.sizes)
        self.errors.extend(other.errors)
        self.values.extend(other.values)
        self.top_hits += other.top_hits
        self.top_rows += other.top_rows

    def stats(self) -> OutputStats:
        cos, per, measure = pooled_cosine(self.dot, self.nr, self.ng), tuple(self.cosines), "cosine"
        if self.by_error and one_value(self.sizes):
            cos, per = one_value_cosines(self.errors, self.values)
            measure = ONE_VALUE_MEASURE
        return OutputStats(
            name=self.name, shape=self.shape or (), max_abs=self.max_abs,
            mean_abs=self.sum_abs / self.n if self.n else 0.0, max_rel=self.max_rel, cosine=cos,
            nonfinite=self.nonfinite, top1_agreement=self.top_hits / self.top_rows if self.top_rows else None,
            per_sample_cosine=per, measure=measure,
        )


def worse_stats(a: OutputStats, b: OutputStats) -> OutputStats:
    """Each statistic at its worse value of the two."""
    return OutputStats(
        name=a.name, shape=a.shape, max_abs=max(a.max_abs, b.max_abs), mean_abs=max(a.mean_abs, b.mean_abs),
        max_rel=max(a.max_rel, b.max_rel), cosine=min(a.cosine, b.cosine), nonfinite=max(a.nonfinite, b.nonfinite),
        top1_agreement=None if a.top1_agreement is None or b.top1_agreement is None
        else min(a.top1_agreement, b.top1_agreement),
        per_sample_cosine=tuple(map(min, a.per_sample_cosine, b.per_sample_cosine))
        if len(a.per_sample_cosine) == len(b.per_sample_cosine) else a.per_sample_cosine,
        measure=a.measure if a.measure == b.measure else "cosine",
    )


def compare_outputs(
    ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], *, top1: bool = False, by_error: bool = False,
    axes: Mapping[str, int] | None = None,
) -> list[OutputStats]:
    """Each output of one sample compared; ``by_error``: one that holds a single value is measured by its error
    against that value (:class:`PooledStats`' ``by_error`` over one sample), whose cosine could only say the sign.
    ``axes``: per output, the axis of its classes for top-1 (the last where not given)."""
    missing = sorted(set(ref) - set(got))
    if missing:
        raise ValueError(f"outputs missing from the candidate: {', '.join(missing)}")
    return [_one_sample(k, ref[k], got[k], top1) if by_error and one_value([ref[k].size])
            else compare_arrays(k, ref[k], got[k], top1=top1, axis=(axes or {}).get(k, -1)) for k in ref]


def _one_sample(name: str, ref: np.ndarray, got: np.ndarray, top1: bool) -> OutputStats:
    pooled = PooledStats(name, top1, by_error=True)
    pooled.add(ref, got)
    return pooled.stats()


def violations_line(problems: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` violations for an error's one line, and how many more there are (a detector's dozen
    outputs made that line 600 characters long; the report's table lists every output)."""
    more = len(problems) - shown
    return "; ".join(problems[:shown]) + (f"; and {more} more output(s) (the table lists each)" if more > 0 else "")


def violations(stats: list[OutputStats], limits: Thresholds) -> list[str]:
    """Human-readable reasons the stats fail ``limits``; empty means pass."""
    out = []
    for s in stats:
        lim = limits.for_output(s.name)
        if lim is None:
            continue
        out += _violations(s, lim)
    return out


def _apart(value: float, limit: float) -> str:
    """``value`` with enough digits to differ visibly from ``limit`` (0.9999997 < 1, not 1.000000 < 1)."""
    for digits in range(6, 13):
        text = f"{value:.{digits}f}"
        if float(text) != limit:
            return text
    return repr(value)


def _violations(s: OutputStats, limits: Thresholds) -> list[str]:
    out = []
    if s.nonfinite and not limits.allow_nonfinite:
        out.append(f"{s.name}: {s.nonfinite} NaN/Inf values where the reference is finite")
    if limits.max_abs is not None and s.max_abs > limits.max_abs:
        out.append(f"{s.name}: max abs error {s.max_abs:.3g} > {limits.max_abs:.3g}")
    if limits.max_rel is not None and s.max_rel > limits.max_rel:
        out.append(f"{s.name}: max rel error {s.max_rel:.3g} > {limits.max_rel:.3g}")
    if limits.min_cosine is not None and s.cosine < limits.min_cosine:
        out.append(f"{s.name}: cosine {_apart(s.cosine, limits.min_cosine)} < {limits.min_cosine:g}")
    if limits.min_top1 is not None and s.top1_agreement is not None and s.top1_agreement < limits.min_top1:
        out.append(f"{s.name}: top-1 agreement {s.top1_agreement:.4f} < {limits.min_top1:.4f}")
    return out
