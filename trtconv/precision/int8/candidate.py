"""An INT8 candidate: Q/DQ (and the FP16 remainder) applied to the prepared model for a set of
placements, the form its accuracy is measured on, and the checks that it is a valid model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from trtconv.errors import InternalError
from trtconv.load import check_structure_only
from trtconv.onnxutil import is_default_domain, iter_graphs
from trtconv.precision.fp16 import Fp16Report, convert_fp16
from trtconv.precision.fp16_graph import emulate_half
from trtconv.precision.int8.accuracy import Accuracy, Cutoff, accuracy_details
from trtconv.precision.int8.bias import apply_bias_shifts
from trtconv.precision.int8.parameters import Int8Settings, ProgressFn
from trtconv.precision.int8.qdq import Placement, Skip, insert_qdq
from trtconv.precision.int8.smooth import apply_smoothing
from trtconv.samples import sample_count


@dataclass(frozen=True)
class Candidate:
    """One INT8 model (as deployed), the model its accuracy is measured on, and its FP16 twin."""

    model: onnx.ModelProto
    runnable: onnx.ModelProto  # == model unless plugins: the calibration twin with the same Q/DQ
    twins: tuple[onnx.ModelProto, ...]  # exact-rounding FP16 twin of ``runnable`` (FP16 remainder)
    fp16: Fp16Report | None

    def accuracy(self, reference: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]],
                 top1: bool | None, progress: ProgressFn | None, memo: list[dict[str, np.ndarray]] | None = None,
                 cutoff: Cutoff | None = None) -> Accuracy:
        return accuracy_details(reference, self.runnable, samples, twins=self.twins, top1=top1, progress=progress,
                               total=sample_count(samples), optimize=self.fp16 is None, memo=memo, cutoff=cutoff)


@dataclass(frozen=True)
class CandidateBuilder:
    """Q/DQ (and the FP16 remainder) applied to the prepared model for a given set of placements."""

    work: onnx.ModelProto
    twin: onnx.ModelProto | None  # the runnable calibration form, prepared the same way
    scales: Mapping[str, float]
    settings: Int8Settings
    peaks: Mapping[str, float] | None
    check_loads: bool = True  # False when the accuracy check runs every candidate anyway
    bias: Mapping[tuple[str, str], np.ndarray] = field(default_factory=dict)  # bias correction per (graph, node)
    smooth: Mapping[tuple[str, str], np.ndarray] = field(default_factory=dict)  # smoothing per LayerNorm

    def runnable(self, placed: Sequence[Placement]) -> list[Placement]:
        if self.twin is None:
            return list(placed)
        names = {n.name for g in iter_graphs(self.twin.graph) for n in g.node}
        return [p for p in placed if p.node in names]

    def _typed(self, base: onnx.ModelProto, placed: Sequence[Placement]) -> tuple[onnx.ModelProto, Any]:
        if self.smooth:
            base = smoothed(base, self.smooth)
        q = insert_qdq(base, placed, self.scales, half=self.settings.remainder == "fp16")
        if self.bias:
            apply_bias_shifts(q, self.bias, {(p.graph, p.node) for p in placed})
        q.ir_version = max(q.ir_version, 4)  # IR 3 wants every initializer listed as an input; we add some
        if self.settings.remainder != "fp16":
            return q, None
        res = convert_fp16(q, self.settings.fp16, None, peaks=self.peaks or {}, check_loads=self.check_loads)
        return res.model, res

    def build(self, placed: Sequence[Placement]) -> Candidate:
        model, res = self._typed(self.work, placed)
        runnable, run_res = (model, res) if self.twin is None else self._typed(self.twin, self.runnable(placed))
        twins = (emulate_half(runnable, set(run_res.half_tensors)),) if run_res is not None else ()
        return Candidate(model, runnable, twins, res.report if res is not None else None)


def smoothed(model: onnx.ModelProto, factors: Mapping[tuple[str, str], np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` with the smoothing ``factors`` applied (exact in float)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    apply_smoothing(out, factors)
    return out


def check_valid(qmodel: onnx.ModelProto, work: Callable[[], onnx.ModelProto]) -> None:
    """``work()``: the model Q/DQ went into, whose own verdict is asked only when ``qmodel`` fails."""
    # The structure alone: the checker checks structure, not values; the whole model would be
    # serialized once more for it, and refuses the absolute paths of weights left on disk.
    try:
        check_structure_only(qmodel, None)
    except onnx.checker.ValidationError as exc:
        if all(is_default_domain(o.domain) for o in qmodel.opset_import) and _passes_checker(work()):
            raise InternalError(f"Q/DQ insertion produced an invalid model: {str(exc).splitlines()[0]}") from exc


def _passes_checker(model: onnx.ModelProto) -> bool:
    """The input's own verdict: Q/DQ insertion inherits what the input already breaks (unsorted nodes...)."""
    try:
        check_structure_only(model, None)
    except onnx.checker.ValidationError:
        return False
    return True


def finalize_placements(
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
