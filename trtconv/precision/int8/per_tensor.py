"""Calibration chosen per tensor (``method="auto"``): one more candidate beside the whole-model methods.

Every whole-model candidate (entropy, percentiles, minmax, mse) comes from the same histograms;
which one is best differs from tensor to tensor (a ReLU output wants its tail clipped, a
hard-swish output with a small far mode does not). For each candidate, the per-layer shadows
of :mod:`trtconv.precision.int8.sensitivity` measure the error every quantized layer adds to its own
output with its inputs quantized by that candidate's scales, everything else FP32 (one ONNX
Runtime session per candidate). Each activation tensor then takes the candidate under which
the layers reading it add the least error (their summed normalized squared error): the error
of the layer's output, not of the tensor alone, so what the layer does with each value
(its weights, its weight quantization) counts. The mix is then judged like every other
candidate, by the whole model on the held-out samples.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from trtconv.onnxutil import iter_graphs
from trtconv.precision.int8.candidate import finalize_placements
from trtconv.precision.int8.qdq import Placement
from trtconv.precision.int8.sensitivity import layer_errors

PER_TENSOR = "per-tensor"  # the mixed candidate's label
PER_TENSOR_SAMPLES = 8  # calibration samples the per-layer errors are measured on (each candidate: one pass)
# A tensor leaves the whole-model winner's scale only for a candidate under which its readers' own error is at
# most this share of the winner's: local error predicts the outputs' only roughly (PP-OCRv4 rec: the pure
# per-tensor argmin reached worst cosine 0.948 where the winner, mse, had 0.986).
SWITCH_BELOW = 0.5


@dataclass(frozen=True)
class PerTensorChoice:
    """The mixed candidate's scales and, per activation tensor, the candidate it took them from."""

    scales: dict[str, float]
    methods: dict[str, str]  # tensor -> candidate label
    sessions: int  # ONNX Runtime passes spent measuring (one per candidate)

    def counts(self) -> dict[str, int]:
        """How many tensors took each candidate's scale."""
        out: dict[str, int] = {}
        for label in self.methods.values():
            out[label] = out.get(label, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def choice_samples(calib: Iterable[Mapping[str, np.ndarray]], held: Iterable[Mapping[str, np.ndarray]]
                   ) -> list[Mapping[str, np.ndarray]]:
    """The first ``PER_TENSOR_SAMPLES`` calibration samples when they can be read again, else the held-out ones
    (the choice is then made on the data that judges it, as the whole-model choice is)."""
    source = calib if iter(calib) is not calib else held
    return list(itertools.islice(source, PER_TENSOR_SAMPLES))


def per_tensor_choice(
    model: onnx.ModelProto,
    placements: Sequence[Placement],
    absent: set[str],
    candidates: Mapping[str, Mapping[str, float]],
    samples: Sequence[Mapping[str, np.ndarray]],
    base: str | None = None,
) -> PerTensorChoice:
    """Each activation tensor's scale from the candidate under which its consumers add the least error.

    ``model``: the prepared calibration form (the shadows go into it, as for the sensitivity);
    ``placements``: every planned placement. ``base``: the whole-model winner, whose scale a tensor keeps
    unless another candidate's error is below ``SWITCH_BELOW`` of it (None: the first candidate, and no
    margin). Ties keep the earlier candidate.
    """
    names = {n.name for g in iter_graphs(model.graph) for n in g.node}
    consumers: dict[str, set[tuple[str, str]]] = {}
    for p in placements:
        if p.kind == "activation":
            consumers.setdefault(p.tensor, set()).add((p.graph, p.node))
    score: dict[str, dict[str, float]] = {}  # tensor -> label -> summed nmse of its consumers
    sessions = 0
    for label, scales in candidates.items():
        placed, _ = finalize_placements(placements, scales, absent)
        placed = [p for p in placed if p.node in names]
        errors = {e.key: e.nmse for e in layer_errors(model, placed, scales, samples)}
        sessions += 1 if placed else 0
        for tensor, layers in consumers.items():
            if tensor in scales and all(k in errors for k in layers):
                score.setdefault(tensor, {})[label] = sum(errors[k] for k in layers)
    order = list(candidates)
    home = base if base is not None else order[0]
    margin = SWITCH_BELOW if base is not None else 1.0
    methods: dict[str, str] = {}
    for tensor, by_label in score.items():
        finite = {k: v for k, v in by_label.items() if np.isfinite(v)}
        if not finite:
            continue
        best = min(finite, key=lambda k: (finite[k], order.index(k)))
        if home not in finite or finite[best] < margin * finite[home]:
            methods[tensor] = best
    first = candidates[home] if order else {}
    scales = {t: candidates[methods[t]][t] if t in methods else s for t, s in first.items()}
    return PerTensorChoice(scales, {t: methods.get(t, home) for t in scales}, sessions)
