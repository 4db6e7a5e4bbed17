"""Candidates that differ only in their activations' scales, measured in one pair of sessions.

Method ``auto`` measures up to six calibrations of one model: the same placements, the same Q/DQ and FP16
remainder; only the activations' scales differ. Built and opened once with those scales as graph inputs (ONNX
Runtime's run of the FP16 model and its exact-rounding twin), each candidate is a set of inputs: the numbers of a
model built with them, bit for bit (the same value of the same type, read by the same kernel; graph optimizations
are off, so nothing folds a constant scale), without a build, two sessions and two serializations of the weights
per candidate (on ddddocr's CRNN, 0.6 s of CPU each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtconv.onnxutil import GraphView, has_lazy_weights
from trtconv.precision.int8.accuracy import Accuracy, Cutoff, Fed, accuracy_details
from trtconv.precision.int8.candidate import CandidateBuilder
from trtconv.precision.int8.measured import measured_form
from trtconv.precision.int8.qdq import Placement, half_exact
from trtconv.reference import session
from trtconv.samples import sample_count


def _key(placed: Sequence[Placement]) -> frozenset[tuple[str, str, int, str, str]]:
    return frozenset((p.graph, p.node, p.input_index, p.tensor, p.kind) for p in placed)


@dataclass(frozen=True)
class ScaleFed:
    """The FP16-remainder candidate of one set of placements, in sessions, its activations' scales inputs."""

    runnable: Any  # ONNX Runtime's session of the model as written
    twin: Any  # and of its exact-rounding FP16 twin
    inputs: Mapping[str, tuple[str, np.dtype]]  # scale input -> (activation tensor, its type in the runnable)
    placed: frozenset[tuple[str, str, int, str, str]]
    constants: tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]] = ({}, {})  # fed to each: measured_form's

    def fits(self, placed: Sequence[Placement]) -> bool:
        """Whether a candidate with these placements is this one with other scales."""
        return _key(placed) == self.placed

    def accuracy(self, scales: Mapping[str, float], reference: onnx.ModelProto,
                 samples: Iterable[Mapping[str, np.ndarray]], top1: bool | None,
                 memo: list[dict[str, np.ndarray]] | None = None, cutoff: Cutoff | None = None) -> Accuracy:
        """:meth:`~trtconv.precision.int8.candidate.Candidate.accuracy` of the candidate with these ``scales``."""
        value = {t: np.float32(half_exact(scales[t])) for t, _ in self.inputs.values()}  # as insert_qdq stores it
        fed = Fed(self.runnable, {**self.constants[0],
                                  **{n: np.asarray(value[t], dtype=d) for n, (t, d) in self.inputs.items()}})
        twin = Fed(self.twin, {**self.constants[1],
                               **{n: np.asarray(value[t], dtype=np.float32) for n, (t, _) in self.inputs.items()}})
        return accuracy_details(reference, fed, samples, twins=(twin,), top1=top1, total=sample_count(samples),
                                optimize=False, memo=memo, cutoff=cutoff)


def scale_fed(builder: CandidateBuilder, placed: Sequence[Placement]) -> ScaleFed | None:
    """The candidate ``builder`` makes of ``placed``, its activations' scales turned into inputs; None where that
    cannot be done as exactly (no FP16 remainder: ONNX Runtime's optimizations fuse Q/DQ with constant scales;
    weights left on disk: two sessions would hold them at once; an activation Q/DQ in a subgraph)."""
    if builder.settings.remainder != "fp16" or has_lazy_weights(builder.work):
        return None
    tensors = {p.tensor for p in placed if p.kind == "activation"}
    if any(p.graph != "main" for p in placed if p.kind == "activation"):
        return None
    candidate = builder.build(placed)
    if len(candidate.twins) != 1:
        return None
    names = _scale_names(candidate.runnable, tensors)
    if names is None:
        return None
    runnable, types = _as_inputs(candidate.runnable, names)
    twin, _ = _as_inputs(candidate.twins[0], names)
    del candidate
    if twin is None or runnable is None:
        return None
    (runnable, run_feeds), (twin, twin_feeds) = measured_form(runnable), measured_form(twin)
    return ScaleFed(session(runnable, arena=True), session(twin, arena=True),
                    {n: (t, types[n]) for n, t in names.items()}, _key(placed), (run_feeds, twin_feeds))


def _scale_names(model: onnx.ModelProto, tensors: set[str]) -> dict[str, str] | None:
    """Each activation Q/DQ's scale initializer -> the activation it quantizes (through the FP16 remainder's
    Casts); None unless every activation has its own, read as nothing but a Q/DQ's scale."""
    view = GraphView(model)
    inits = {t.name for t in model.graph.initializer}
    found: dict[str, str] = {}
    for q in model.graph.node:
        if q.op_type != "QuantizeLinear":
            continue
        src = q.input[0]
        while src not in tensors and (site := view.producer(src)) is not None and site.node.op_type == "Cast":
            src = site.node.input[0]
        if src not in tensors:
            continue  # not an activation's (weights have DequantizeLinear only)
        scales = [q.input[1], *(r.node.input[1] for r in view.readers(q.output[0])
                                if r.node.op_type == "DequantizeLinear")]
        for name in scales:
            if name not in inits or found.setdefault(name, src) != src:
                return None
    if set(found.values()) != tensors:
        return None
    for name in found:
        if any(r.node.op_type not in ("QuantizeLinear", "DequantizeLinear") or list(r.node.input).index(name) != 1
               for r in view.readers(name)):
            return None
    return found


def _as_inputs(model: onnx.ModelProto, names: Mapping[str, str]) -> tuple[onnx.ModelProto | None, dict[str, np.dtype]]:
    """A copy of ``model`` with these scalar initializers made graph inputs of the same type."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types: dict[str, np.dtype] = {}
    g = out.graph
    for i in reversed(range(len(g.initializer))):  # by index, in place: re-adding the rest would copy every weight
        t = g.initializer[i]
        if t.name in names:
            if t.dims:
                return None, {}
            types[t.name] = numpy_helper.to_array(t).dtype
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, []))
            del g.initializer[i]
    if len(types) != len(names):
        return None, {}
    return out, types
