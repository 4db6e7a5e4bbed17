"""The INT8 model against FP32 on held-out samples, in ONNX Runtime: the numbers the gate judges.

Statistics are pooled over samples of possibly different shapes (cosine from summed dot
products, top-1 agreement over every row). With an FP16 remainder the candidate runs
twice — as ONNX Runtime runs it, and as its exact-rounding twin
(:func:`trtconv.precision.fp16_graph.emulate_half`) — and each statistic is the worse of the two.
Each session runs over every sample before the next is made (the reference's outputs kept):
sessions alive together would hold their weights together.

Choosing measures many candidates on the same samples and keeps the best; a :class:`Cutoff` stops measuring
one as soon as it cannot beat the best so far (a sample under the limit where the best passes; its pooled
cosine bounded below the best's), the samples taken in the order that shows it soonest: the best's worst first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from trtconv.errors import DataError
from trtconv.precision.int8.measured import measured_form
from trtconv.reference import (
    ONE_VALUE_MEASURE,
    OutputStats,
    PooledStats,
    Thresholds,
    class_axes,
    dot,
    one_value,
    pooled_cosine,
    run,
    session,
    worse_stats,
)

# progress(stage, done, total): total may be None
ProgressFn = Callable[[str, int, "int | None"], None]


def with_origin(samples: Iterable[Mapping[str, np.ndarray]], what: str) -> Iterator[tuple[str, Mapping]]:
    """(where it came from, sample): file names from a SampleSet, indices otherwise."""
    fn = getattr(samples, "with_origin", None)
    if callable(fn):
        return fn()
    return ((f"{what} {i}", s) for i, s in enumerate(samples))


def run_failure(origin: str, exc: Exception) -> DataError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DataError(f"{origin}: ONNX Runtime failed on this sample ({first[:300]})",
                     hint="check the sample's shapes and values against the model's inputs")


@dataclass(frozen=True)
class Fed:
    """A model already in a session, run with these inputs added to each sample's (one candidate's scales, in a
    session that all of them share: :mod:`~trtconv.precision.int8.scale_fed`)."""

    session: Any
    feeds: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class WorstSample:
    """The held-out sample on which one output agreed least with FP32."""

    output: str
    index: int  # position among the held-out samples
    origin: str  # where it came from (file name, or "accuracy sample N")
    cosine: float

    def to_json(self) -> dict[str, object]:
        return {"output": self.output, "index": self.index, "sample": self.origin,
                "cosine": float(f"{self.cosine:.8f}")}


@dataclass(frozen=True)
class Accuracy:
    """Pooled statistics per output, the number of samples, and each output's worst sample."""

    stats: tuple[OutputStats, ...]
    samples: int
    worst: tuple[WorstSample, ...] = ()
    cosines: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # output -> each sample's cosine
    origins: tuple[str, ...] = ()  # where each sample came from
    # a Cutoff stopped the measurement: ``stats`` and ``cosines`` are partial; what is known is ``bound`` (the
    # worst output's pooled cosine is at most this) and ``could_pass`` (no sample measured missed its limit)
    stopped: bool = False
    bound: float = 1.0
    could_pass: bool = True

    def hardest_first(self) -> tuple[int, ...]:
        """The samples' indices, lowest worst-output cosine first (ties: in order)."""
        n = self.samples
        worst = [min((c[i] for c in self.cosines.values() if i < len(c)), default=1.0) for i in range(n)]
        return tuple(sorted(range(n), key=lambda i: (worst[i] if worst[i] == worst[i] else -2.0, i)))


@dataclass(frozen=True)
class Cutoff:
    """Choosing's early stop: the score of the best candidate so far — whether it agreed with FP32 (``passes``)
    and its worst output's pooled cosine — which a candidate measured after it must beat to be chosen (a tie
    keeps the earlier), and the order to measure the samples in (``order``: the best's hardest first)."""

    passes: bool
    worst: float
    thresholds: Thresholds
    order: tuple[int, ...] = ()

    def cannot_win(self, could_pass: bool, bound: float) -> bool:
        """Whether a candidate that can at best score (``could_pass``, ``bound``) loses to the best: a sample
        missed where the best passes, or a bound strictly below the best's worst (no tie is decided on a
        partial measurement, whichever way ties go)."""
        if self.passes and not could_pass:
            return True
        return could_pass <= self.passes and bound < self.worst


def accuracy_report(reference: onnx.ModelProto, candidate: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]],
                    **kw) -> tuple[tuple[OutputStats, ...], int]:
    """(statistics per output, samples): :func:`accuracy_details` without the worst samples."""
    acc = accuracy_details(reference, candidate, samples, **kw)
    return acc.stats, acc.samples


def accuracy_details(
    reference: onnx.ModelProto,
    candidate: onnx.ModelProto | Fed,
    samples: Iterable[Mapping[str, np.ndarray]],
    *,
    twins: Sequence[onnx.ModelProto | Fed] = (),
    top1: bool | None = None,
    progress: ProgressFn | None = None,
    total: int | None = None,
    optimize: bool = True,
    memo: list[dict[str, np.ndarray]] | None = None,
    cutoff: Cutoff | None = None,
) -> Accuracy:
    """Candidate (and each twin: the worse counts) against reference, per output, over all ``samples``;
    each output's worst sample (the lowest cosine of candidate and twins).

    ``optimize=False`` runs the candidates as written: ONNX Runtime 1.32's graph optimizations
    fuse float16 Q/DQ around Conv into kernels that compute something else (PP-OCRv4 det:
    cosine 0.883 optimized, 0.989 as written, where the FP32-remainder model gives 0.989).
    ``memo``: the reference's outputs per sample, filled on the first call and reused after
    (the auto-exclude search measures many candidates on the same samples). ``cutoff`` (re-iterable samples):
    stop as soon as the candidate cannot beat that score (the result says ``stopped``).
    """

    outputs = [o.name for o in reference.graph.output]
    axes = class_axes(reference)  # asked for top-1 (top1=True): of every output, along its classes where known
    classifiers = axes if top1 is None else ({o: axes.get(o, -1) for o in outputs} if top1 else {})
    models = (candidate, *twins)
    accs = [{o: PooledStats(o, o in classifiers, by_error=True, axis=classifiers.get(o, -1)) for o in outputs}
            for _ in models]
    refs: list[dict[str, np.ndarray]] = memo if memo is not None else []
    per_sample: dict[tuple[str, int], tuple[str, float]] = {}  # (output, sample) -> (origin, worst cosine)
    stop: _Stop | None = None
    if iter(samples) is samples:  # one pass only: every session alive at once, sample by sample
        n = _interleaved(reference, models, samples, accs, refs, optimize, progress, total, per_sample)
    else:
        stop = None if cutoff is None else _Stop(cutoff, outputs)
        n = _one_at_a_time(reference, models, samples, accs, refs, optimize, progress, total, per_sample, stop)
    result = []
    for o in outputs:
        if not accs[0][o].n:
            continue
        st = accs[0][o].stats()
        for acc in accs[1:]:
            st = worse_stats(st, acc[o].stats())
        result.append(st)
    names = [st.name for st in result]
    origins = [""] * n
    for (_, i), (origin, _) in per_sample.items():
        if i < n:
            origins[i] = origin
    for st in result:  # one value per sample: each sample's error against the RMS, known once all are measured
        if st.measure == ONE_VALUE_MEASURE and len(st.per_sample_cosine) == n and not (stop and stop.stopped):
            for i, c in enumerate(st.per_sample_cosine):
                per_sample[(st.name, i)] = (origins[i], c)
    cosines = {o: tuple(per_sample.get((o, i), ("", 1.0))[1] for i in range(n)) for o in names}
    if stop is not None and stop.stopped:
        return Accuracy(tuple(result), n, _worst(per_sample, names), cosines, tuple(origins), True, stop.bound,
                        stop.could_pass)
    return Accuracy(tuple(result), n, _worst(per_sample, names), cosines, tuple(origins))


class _Stop:
    """The running bound of one candidate's score against a :class:`Cutoff` (the models of one candidate in
    turn: ONNX Runtime's run, then each FP16 twin; the score is the worse of them, so each bounds it).

    The bound on an output's pooled cosine ``c`` after some samples: with ``R`` and ``r`` the reference's squared
    norms over the samples measured and those left, Cauchy-Schwarz gives ``c <= sqrt((R c_m^2 + r) / (R + r))``
    (``c_m``: the pooled cosine so far, when >= 0; else ``sqrt(r / (R + r))``), whatever the rest returns.
    """

    def __init__(self, cutoff: Cutoff, outputs: Sequence[str]) -> None:
        self.cutoff, self.outputs = cutoff, outputs
        self.stopped = False
        self.could_pass = True
        self.bound = 1.0
        self.done: dict[str, float] = {}  # output -> the worst pooled cosine of the models measured in full
        self.left: dict[str, float] = {}
        self.small: set[str] = set()  # outputs of one value per sample

    def start(self, refs: Sequence[Mapping[str, np.ndarray]]) -> None:
        """A model's pass begins: every sample's reference energy is still to come. An output of one value per
        sample is measured against its RMS over all of them (:func:`~trtconv.reference.compare.one_value_cosines`):
        none of its samples is known to miss, nor its pooled measure bounded, before the last, so it stops nothing
        (the bound over the other outputs still bounds the worst output's)."""
        self.small = {o for o in self.outputs if one_value(int(r[o].size) for r in refs if o in r)}
        self.left = {o: sum(_energy(r[o]) for r in refs if o in r and r[o].dtype.kind in "fc") for o in self.outputs}

    def add(self, acc: Mapping[str, PooledStats], ref: Mapping[str, np.ndarray], cosines: Mapping[str, float],
            last: bool, final: bool) -> bool:
        """One more sample measured (its cosine per output; ``last``: the model's last sample, ``final``: the
        candidate's): True when the candidate cannot win any more."""
        for o, c in cosines.items():
            if o in self.small:
                continue
            limits = self.cutoff.thresholds.for_output(o)
            if limits is not None and limits.min_cosine is not None and not c >= limits.min_cosine:
                self.could_pass = False
        bound = 1.0
        for o in self.outputs:
            if o in ref and ref[o].dtype.kind in "fc":
                self.left[o] = max(self.left[o] - _energy(ref[o]), 0.0)
            st = acc[o]
            if not st.n:
                continue
            if last:
                final_stats = st.stats()
                self.done[o] = min(self.done.get(o, 1.0), final_stats.cosine)
                if o in self.small:  # every sample measured: each one's error against the RMS is known now
                    limits = self.cutoff.thresholds.for_output(o)
                    if limits is not None and limits.min_cosine is not None and not all(
                            c >= limits.min_cosine for c in final_stats.per_sample_cosine):
                        self.could_pass = False
            if o in self.small:
                bound = min(bound, self.done.get(o, 1.0))
                continue
            now = pooled_cosine(st.dot, st.nr, st.ng)  # the pooled cosine so far
            r_all = st.nr + self.left.get(o, 0.0)
            if r_all <= 0:
                b = 1.0
            elif now >= 0:
                b = float(np.sqrt(min(1.0, (st.nr * now * now + self.left.get(o, 0.0)) / r_all)))
            else:
                b = float(np.sqrt(self.left.get(o, 0.0) / r_all))
            bound = min(bound, b, self.done.get(o, 1.0))
        self.bound = min(bound, *self.done.values()) if self.done else bound
        if not final and self.cutoff.cannot_win(self.could_pass, self.bound):
            self.stopped = True
        return self.stopped


_ENERGY: dict[int, float] = {}  # id of a reference output -> its energy, while it lives


def _energy(x: np.ndarray) -> float:
    """The squared norm of a reference output's finite values: the same outputs (``memo``) are bounded again for
    every model of every candidate, so each is computed once while the array lives."""
    key = id(x)
    if key not in _ENERGY:
        v = np.where(np.isfinite(x), x, 0).astype(np.float64).ravel()
        _ENERGY[key] = dot(v, v)
        weakref.finalize(x, _ENERGY.pop, key, None)
    return _ENERGY[key]


def _worst(per_sample: Mapping[tuple[str, int], tuple[str, float]], outputs: Sequence[str]) -> tuple[WorstSample, ...]:
    out = []
    for o in outputs:
        rows = [(cos, i, origin) for (name, i), (origin, cos) in per_sample.items() if name == o]
        if rows:
            cos, i, origin = min(rows)
            out.append(WorstSample(o, i, origin, cos))
    return tuple(out)


def _one_at_a_time(reference: onnx.ModelProto, models: Sequence[onnx.ModelProto | Fed],
                   samples: Iterable[Mapping[str, np.ndarray]], accs: list[dict[str, PooledStats]],
                   refs: list[dict[str, np.ndarray]], optimize: bool, progress: ProgressFn | None,
                   total: int | None, per_sample: dict[tuple[str, int], tuple[str, float]],
                   stop: _Stop | None = None) -> int:
    """One session at a time, each over every sample: the reference first, its outputs kept (``stop``: each
    candidate model's samples in the cutoff's order, until it cannot win)."""
    outputs = [o.name for o in reference.graph.output]
    passes = len(models) + (0 if refs else 1)
    scale = None if total is None else total * passes
    done = 0
    if not refs:
        ref_sess = session(reference, optimize=True, arena=True)
        for origin, sample in with_origin(samples, "accuracy sample"):
            refs.append(_run(ref_sess, sample, None, origin))
            done += 1
            if progress:
                progress("accuracy", done, scale)
        del ref_sess
    n = 0
    if stop is not None:
        return _stopping(models, samples, accs, refs, optimize, per_sample, stop, outputs)
    for model, acc in zip(models, accs):
        sess = _session(model, optimize)
        n = 0
        for ref, (origin, sample) in zip(refs, with_origin(samples, "accuracy sample")):
            _add(acc, outputs, ref, _run(sess, sample, outputs, origin), per_sample, n, origin)
            n += 1
            done += 1
            if progress:
                progress("accuracy", done, scale)
        del sess
    return n


def _stopping(models: Sequence[onnx.ModelProto | Fed], samples: Iterable[Mapping[str, np.ndarray]],
              accs: list[dict[str, PooledStats]], refs: list[dict[str, np.ndarray]], optimize: bool,
              per_sample: dict[tuple[str, int], tuple[str, float]], stop: _Stop, outputs: list[str]) -> int:
    """The candidate models in turn, each over the samples in the cutoff's order (when the samples can be
    taken by index), until ``stop`` says the candidate cannot win; the samples the first model measured."""
    n = len(refs)
    measured = 0
    # the FP16 twins first: exact rounding misses the limit more often than ONNX Runtime's own run does (PP-OCRv4
    # rec: an auto-exclude check met it on every sample in ONNX Runtime and missed on the 9th in the twin)
    turns = [*range(1, len(models)), 0]
    for k, (model, acc) in enumerate((models[j], accs[j]) for j in turns):
        sess = _session(model, optimize)
        stop.start(refs)
        running = {o: PooledStats(o, st.top1, st.by_error, st.axis) for o, st in acc.items()}  # so far, in the order measured
        parts: dict[int, dict[str, PooledStats]] = {}  # each sample's own, folded into ``acc`` in sample order
        for i, origin, sample in _in_order(samples, stop.cutoff.order, n):
            got = _run(sess, sample, outputs, origin)
            part = parts[i] = {o: PooledStats(o, st.top1, st.by_error, st.axis) for o, st in acc.items()}
            _add(part, outputs, refs[i], got, per_sample, i, origin)
            for o, st in part.items():
                running[o].merge(st)
            cos = {o: per_sample[(o, i)][1] for o in outputs if (o, i) in per_sample}
            if stop.add(running, refs[i], cos, last=len(parts) == n, final=len(parts) == n and k == len(models) - 1):
                break
        del sess
        for i in sorted(parts):
            for o, st in parts[i].items():
                acc[o].merge(st)
        measured = measured or len(parts)
        if stop.stopped:
            break
    return measured


def _in_order(samples: Iterable[Mapping[str, np.ndarray]], order: Sequence[int], n: int
              ) -> Iterator[tuple[int, str, Mapping[str, np.ndarray]]]:
    """(index, origin, sample): those at ``order`` first, then the rest in order, when ``samples`` can be taken
    by index (:class:`~trtconv.precision.int8.resident.Resident`); else in order."""
    take = getattr(samples, "item", None)
    if not callable(take) or not order:
        for i, (origin, sample) in enumerate(with_origin(samples, "accuracy sample")):
            if i >= n:
                return
            yield i, origin, sample
        return
    first = [i for i in dict.fromkeys(order) if 0 <= i < n]
    for i in (*first, *sorted(set(range(n)) - set(first))):
        origin, sample = take(i)
        yield i, origin, sample


def _session(model: onnx.ModelProto | Fed, optimize: bool):
    """A candidate's session, alone while it runs every sample it is asked (the memory arena kept); as written,
    what it computes from constants computed once (:func:`~trtconv.precision.int8.measured.measured_form`: the
    same outputs, bit for bit; the Casts' values fed with every sample). Optimized, ONNX Runtime fuses the Q/DQ
    around a layer itself: left as they are. A :class:`Fed` model is in its session already."""
    if isinstance(model, Fed):
        return model
    if optimize:
        return session(model, optimize=True, arena=True)
    form, feeds = measured_form(model)
    sess = session(form, optimize=False, arena=True)
    return Fed(sess, feeds) if feeds else sess


def _run(sess, sample: Mapping[str, np.ndarray], outputs: list[str] | None, origin: str) -> dict[str, np.ndarray]:
    if isinstance(sess, Fed):
        sess, sample = sess.session, {**sample, **sess.feeds}
    try:
        return run(sess, sample, outputs)
    except Exception as exc:
        raise run_failure(origin, exc) from exc


def _add(acc: dict[str, PooledStats], outputs: Sequence[str], ref: Mapping[str, np.ndarray],
         got: Mapping[str, np.ndarray], per_sample: dict[tuple[str, int], tuple[str, float]], index: int,
         origin: str) -> None:
    for o in outputs:
        if ref[o].dtype.kind in "fc":
            g = np.asarray(got[o]).astype(ref[o].dtype)
            cos = pooled_cosine(*acc[o].add(ref[o], g))
            if (o, index) not in per_sample or cos < per_sample[(o, index)][1]:
                per_sample[(o, index)] = (origin, cos)


def _interleaved(reference: onnx.ModelProto, models: Sequence[onnx.ModelProto | Fed], samples: Iterable[Mapping[str, np.ndarray]],
                 accs: list[dict[str, PooledStats]], refs: list[dict[str, np.ndarray]], optimize: bool,
                 progress: ProgressFn | None, total: int | None,
                 per_sample: dict[tuple[str, int], tuple[str, float]]) -> int:
    """Samples that can be read once: the reference and every candidate run on each sample in turn."""
    outputs = [o.name for o in reference.graph.output]
    ref_sess = session(reference, optimize=True) if len(refs) == 0 else None
    sessions = [m if isinstance(m, Fed) else session(m, optimize=optimize) for m in models]
    n = 0
    for origin, sample in with_origin(samples, "accuracy sample"):
        if n < len(refs):
            ref = refs[n]
        else:
            ref_sess = ref_sess or session(reference, optimize=True)
            ref = _run(ref_sess, sample, None, origin)
            refs.append(ref)
        for sess, acc in zip(sessions, accs):
            _add(acc, outputs, ref, _run(sess, sample, outputs, origin), per_sample, n, origin)
        n += 1
        if progress:
            progress("accuracy", n, total)
    return n
