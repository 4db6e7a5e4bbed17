"""The FP16 accuracy check: the FP16 model, and its exact-rounding twin, against the FP32 model on samples.

ONNX Runtime's CPU provider computes most FP16 ops in float32 and drops the conversions between them, so the
FP16 model run there skips most of the rounding TensorRT will do; the twin (:func:`emulate_half`) rounds every
tensor the FP16 model stores in FP16 explicitly. Per output the worse of the two counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from trtconv.errors import InternalError, InvalidModelError
from trtconv.load import approx_size, ensure_room
from trtconv.precision.fp16_graph import emulate_half
from trtconv.reference import (
    ONE_VALUE_MEASURE,
    OutputStats,
    class_axes,
    compare_arrays,
    one_value,
    one_value_cosines,
    ort,
    worse_stats,
)

# progress(stage, done, total), as in trtconv.precision.int8.compose: stages "fold", "peaks", "convert", "accuracy",
# "locate"
ProgressFn = Callable[[str, int, "int | None"], None]


def fp16_accuracy(
    reference: onnx.ModelProto,
    fp16_model: onnx.ModelProto,
    half_tensors: set[str],
    samples: Iterable[Mapping[str, np.ndarray]],
    *,
    progress: ProgressFn | None = None,
    total: int | None = None,
    top1: bool = False,
    reference_outputs: list[dict[str, np.ndarray]] | None = None,
) -> tuple[tuple[OutputStats, ...], int]:
    """Per output, the worse of: the FP16 model as ONNX Runtime runs it, and its exact-rounding twin.

    The first proves the model loads, runs and stays finite; the second measures the
    rounding ONNX Runtime's CPU provider skips (see :func:`emulate_half`). Statistics
    are the worst over samples (max errors, min cosine, summed NaN/Inf). ``reference_outputs``:
    the FP32 outputs per sample, when the caller already has them (no FP32 pass then).
    """
    half_inputs = fp16_inputs(fp16_model)
    # progress counts model runs, as INT8's accuracy report does: a pass is one run per sample
    steps = None if total is None else total * (2 if reference_outputs is not None else 3)
    done = 0
    if progress is not None:
        progress("accuracy", 0, steps)

    def ran() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress("accuracy", done, steps)

    if reference_outputs is None:  # one FP32 pass per sample, unless the caller kept them
        ref_sess = ort.session(reference)
        reference_outputs = []
        for sample in samples:
            reference_outputs.append(ort.run(ref_sess, sample))
            ran()
        del ref_sess
    try:
        cand_sess = ort.session(fp16_model)
    except InvalidModelError as exc:
        raise InternalError(f"ONNX Runtime refuses the FP16 model although it runs the FP32 one: {exc}") from exc
    # One session at a time: each holds a copy of the weights.
    axes = class_axes(reference) if top1 else {}  # top-1 along each output's classes where known, else the last axis
    got = _compare_all(cand_sess, samples, reference_outputs, half_inputs, np.float16, top1, axes, ran)
    del cand_sess
    ensure_room(3 * approx_size(fp16_model), "making the FP16 model's FP32 twin")  # a copy, then FP32 weights
    emu_sess = ort.session(emulate_half(fp16_model, half_tensors))
    emu = _compare_all(emu_sess, samples, reference_outputs, half_inputs, np.float32, top1, axes, ran)
    del emu_sess
    per_output: dict[str, list[OutputStats]] = {}
    for a_sample, b_sample in zip(got, emu):
        for name, a in a_sample.items():
            per_output.setdefault(name, []).append(worse_stats(a, b_sample[name]))
    return tuple(_worst(v, [r[name] for r in reference_outputs[:len(got)]]) for name, v in per_output.items()), len(got)


def fp16_inputs(fp16_model: onnx.ModelProto) -> frozenset[str]:
    """The inputs an FP16 model takes in FP16 (samples are rounded so before the twin reads them)."""
    return frozenset(vi.name for vi in fp16_model.graph.input if vi.type.tensor_type.elem_type == TensorProto.FLOAT16)


def _compare_all(sess, samples: Iterable[Mapping[str, np.ndarray]], reference_outputs: list[dict[str, np.ndarray]],
                 half_inputs: set[str], half_dtype: Any, top1: bool, axes: Mapping[str, int],
                 ran: Callable[[], None]) -> list[dict[str, OutputStats]]:
    """Per sample, per float output: ``sess`` (half inputs cast to ``half_dtype`` after FP16
    rounding) against the FP32 reference outputs; ``ran()`` after each sample."""
    out = []
    for sample, ref in zip(samples, reference_outputs):
        half = {k: np.asarray(v).astype(np.float16).astype(half_dtype) for k, v in sample.items() if k in half_inputs}
        got = ort.run(sess, {**sample, **half})
        out.append({name: compare_arrays(name, r, got[name], top1=top1, axis=axes.get(name, -1)) for name, r in ref.items()
                    if r.dtype.kind == "f"})
        ran()
    return out


def _worst(stats: list[OutputStats], refs: Sequence[np.ndarray]) -> OutputStats:
    """The worst over samples; an output of one value per sample measured by each sample's error against the
    RMS of ``refs`` (the reference's values), as INT8's gate measures it (:func:`one_value_cosines`)."""
    per, measure = tuple(s.cosine for s in stats), "cosine"
    if one_value(r.size for r in refs):  # one value: its max abs error is its error
        _, per = one_value_cosines([s.max_abs for s in stats],
                                   [float(r.ravel()[0]) if np.isfinite(r).all() else float("nan") for r in refs if r.size])
        measure = ONE_VALUE_MEASURE
    return OutputStats(
        name=stats[0].name,
        shape=stats[0].shape,
        max_abs=max(s.max_abs for s in stats),
        mean_abs=float(np.mean([s.mean_abs for s in stats])),
        max_rel=max(s.max_rel for s in stats),
        cosine=min(per),
        nonfinite=sum(s.nonfinite for s in stats),
        top1_agreement=_mean_or_none([s.top1_agreement for s in stats]),
        per_sample_cosine=per,
        measure=measure,
    )


def _mean_or_none(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
