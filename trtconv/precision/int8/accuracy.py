"""The INT8 model against FP32 on held-out samples, in ONNX Runtime: the numbers the gate judges.

Statistics are pooled over samples of possibly different shapes (cosine from summed dot
products, top-1 agreement over every row). With an FP16 remainder the candidate runs
twice — as ONNX Runtime runs it, and as its exact-rounding twin
(:func:`trtconv.precision.fp16_graph.emulate_half`) — and each statistic is the worse of the two.
Each session runs over every sample before the next is made (the reference's outputs kept):
sessions alive together would hold their weights together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from trtconv.errors import DataError
from trtconv.onnxutil import GraphView
from trtconv.precision.int8.qdq import SHAPE_ONLY
from trtconv.reference import OutputStats, PooledStats, run, session, worse_stats

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


def classifier_outputs(model: onnx.ModelProto) -> set[str]:
    """Outputs that look like class scores: computed by a Softmax, or shaped [N, C]."""
    view = GraphView(model)
    out = set()
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if view.producer_op(vi.name, through=SHAPE_ONLY) in ("Softmax", "LogSoftmax"):
            out.add(vi.name)
        elif len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value > 1:
            out.add(vi.name)
    return out


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


def sample_cosine(ref: np.ndarray, got: np.ndarray) -> float:
    """Cosine of one sample's output (finite values only; 1 when both are zero), as ``PooledStats`` pools it."""
    mask = np.isfinite(ref) & np.isfinite(got)
    r = np.where(mask, ref, 0).astype(np.float64).ravel()
    g = np.where(mask, got, 0).astype(np.float64).ravel()
    nr, ng = float(r @ r), float(g @ g)
    if nr == 0 and ng == 0:
        return 1.0
    if nr == 0 or ng == 0:
        return 0.0
    return float(np.clip(float(r @ g) / np.sqrt(nr * ng), -1.0, 1.0))


def accuracy_report(reference: onnx.ModelProto, candidate: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]],
                    **kw) -> tuple[tuple[OutputStats, ...], int]:
    """(statistics per output, samples): :func:`accuracy_details` without the worst samples."""
    acc = accuracy_details(reference, candidate, samples, **kw)
    return acc.stats, acc.samples


def accuracy_details(
    reference: onnx.ModelProto,
    candidate: onnx.ModelProto,
    samples: Iterable[Mapping[str, np.ndarray]],
    *,
    twins: Sequence[onnx.ModelProto] = (),
    top1: bool | None = None,
    progress: ProgressFn | None = None,
    total: int | None = None,
    optimize: bool = True,
    memo: list[dict[str, np.ndarray]] | None = None,
) -> Accuracy:
    """Candidate (and each twin: the worse counts) against reference, per output, over all ``samples``;
    each output's worst sample (the lowest cosine of candidate and twins).

    ``optimize=False`` runs the candidates as written: ONNX Runtime 1.32's graph optimizations
    fuse float16 Q/DQ around Conv into kernels that compute something else (PP-OCRv4 det:
    cosine 0.883 optimized, 0.989 as written, where the FP32-remainder model gives 0.989).
    ``memo``: the reference's outputs per sample, filled on the first call and reused after
    (the auto-exclude search measures many candidates on the same samples).
    """

    outputs = [o.name for o in reference.graph.output]
    classifiers = classifier_outputs(reference) if top1 is None else (set(outputs) if top1 else set())
    models = (candidate, *twins)
    accs = [{o: PooledStats(o, o in classifiers) for o in outputs} for _ in models]
    refs: list[dict[str, np.ndarray]] = memo if memo is not None else []
    per_sample: dict[tuple[str, int], tuple[str, float]] = {}  # (output, sample) -> (origin, worst cosine)
    if iter(samples) is samples:  # one pass only: every session alive at once, sample by sample
        n = _interleaved(reference, models, samples, accs, refs, optimize, progress, total, per_sample)
    else:
        n = _one_at_a_time(reference, models, samples, accs, refs, optimize, progress, total, per_sample)
    result = []
    for o in outputs:
        if not accs[0][o].n:
            continue
        st = accs[0][o].stats()
        for acc in accs[1:]:
            st = worse_stats(st, acc[o].stats())
        result.append(st)
    return Accuracy(tuple(result), n, _worst(per_sample, [st.name for st in result]))


def _worst(per_sample: Mapping[tuple[str, int], tuple[str, float]], outputs: Sequence[str]) -> tuple[WorstSample, ...]:
    out = []
    for o in outputs:
        rows = [(cos, i, origin) for (name, i), (origin, cos) in per_sample.items() if name == o]
        if rows:
            cos, i, origin = min(rows)
            out.append(WorstSample(o, i, origin, cos))
    return tuple(out)


def _one_at_a_time(reference: onnx.ModelProto, models: Sequence[onnx.ModelProto],
                   samples: Iterable[Mapping[str, np.ndarray]], accs: list[dict[str, PooledStats]],
                   refs: list[dict[str, np.ndarray]], optimize: bool, progress: ProgressFn | None,
                   total: int | None, per_sample: dict[tuple[str, int], tuple[str, float]]) -> int:
    """One session at a time, each over every sample: the reference first, its outputs kept."""
    outputs = [o.name for o in reference.graph.output]
    passes = len(models) + (0 if refs else 1)
    scale = None if total is None else total * passes
    done = 0
    if not refs:
        ref_sess = session(reference, optimize=True)
        for origin, sample in with_origin(samples, "accuracy sample"):
            refs.append(_run(ref_sess, sample, None, origin))
            done += 1
            if progress:
                progress("accuracy", done, scale)
        del ref_sess
    n = 0
    for model, acc in zip(models, accs):
        sess = session(model, optimize=optimize)
        n = 0
        for ref, (origin, sample) in zip(refs, with_origin(samples, "accuracy sample")):
            _add(acc, outputs, ref, _run(sess, sample, outputs, origin), per_sample, n, origin)
            n += 1
            done += 1
            if progress:
                progress("accuracy", done, scale)
        del sess
    return n


def _run(sess, sample: Mapping[str, np.ndarray], outputs: list[str] | None, origin: str) -> dict[str, np.ndarray]:
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
            acc[o].add(ref[o], g)
            cos = sample_cosine(ref[o], g)
            if (o, index) not in per_sample or cos < per_sample[(o, index)][1]:
                per_sample[(o, index)] = (origin, cos)


def _interleaved(reference: onnx.ModelProto, models: Sequence[onnx.ModelProto], samples: Iterable[Mapping[str, np.ndarray]],
                 accs: list[dict[str, PooledStats]], refs: list[dict[str, np.ndarray]], optimize: bool,
                 progress: ProgressFn | None, total: int | None,
                 per_sample: dict[tuple[str, int], tuple[str, float]]) -> int:
    """Samples that can be read once: the reference and every candidate run on each sample in turn."""
    outputs = [o.name for o in reference.graph.output]
    ref_sess = session(reference, optimize=True) if len(refs) == 0 else None
    sessions = [session(m, optimize=optimize) for m in models]
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
