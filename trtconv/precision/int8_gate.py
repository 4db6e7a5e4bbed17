"""The INT8 gate: the candidate against FP32 on held-out samples, the layers to blame when it
fails, and ``auto_exclude``'s search for the fewest layers to keep out of INT8.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from trtconv.precision.int8_accuracy import Accuracy, WorstSample
from trtconv.precision.int8_candidate import Candidate, CandidateBuilder
from trtconv.precision.int8_prepare import Pair, PreparedModels
from trtconv.precision.int8_settings import Int8Settings, ProgressFn
from trtconv.precision.qdq import Placement, Skip
from trtconv.precision.sensitivity import LayerError, fewest_exclusions, layer_errors
from trtconv.reference.compare import OutputStats, violations

Samples = Iterable[Mapping[str, np.ndarray]]
Key = tuple[str, str]  # (graph, node)


@dataclass(frozen=True)
class GateOutcome:
    """The gate's verdict on the candidate it ends with (auto-exclude may have replaced it)."""

    candidate: Candidate
    placed: tuple[Placement, ...]
    accuracy: tuple[OutputStats, ...] = ()
    samples: int = 0
    worst: tuple[WorstSample, ...] = ()  # each output's worst held-out sample
    violations: tuple[str, ...] = ()
    sensitivity: tuple[LayerError, ...] = ()  # worst first
    excluded: tuple[Key, ...] = ()  # kept out of INT8 by auto-exclude
    checks: int = 0  # candidate models the auto-exclude search ran
    skips: tuple[Skip, ...] = ()  # the excluded layers, with the reason


@dataclass(frozen=True)
class GateInputs:
    """What the gate reads besides the candidate: plain data, and how to build another candidate."""

    reference: onnx.ModelProto  # the FP32 model the outputs are compared with
    samples: Samples
    settings: Int8Settings
    scales: Mapping[str, float]
    runnable: Sequence[Placement]  # placements the calibration form has (sensitivity runs on it)
    builder: Callable[[Pair], CandidateBuilder]


def run_gate(candidate: Candidate, placed: Sequence[Placement], gate: GateInputs, prepared: PreparedModels,
             progress: ProgressFn | None) -> GateOutcome:
    """Measure ``candidate``; when it fails (or sensitivity is asked), rank the layers; when it fails and
    ``auto_exclude`` is on, search for the fewest layers to keep out of INT8."""
    settings = gate.settings
    memo: list[dict[str, np.ndarray]] = []  # the reference's outputs, kept for every candidate
    acc = candidate.accuracy(gate.reference, gate.samples, settings.top1, progress, memo)
    candidate = replace(candidate, twins=())  # measured: what follows needs the model, not its twins
    bad = tuple(violations(list(acc.stats), settings.thresholds))
    outcome = GateOutcome(candidate, tuple(placed), acc.stats, acc.samples, acc.worst, bad)
    if not bad and not settings.sensitivity:
        return outcome
    if progress:
        progress("sensitivity", 0, None)
    errors = layer_errors(prepared.get()[1], gate.runnable, gate.scales, gate.samples)
    outcome = replace(outcome, sensitivity=errors)
    if bad and settings.auto_exclude:
        outcome = _auto_exclude(outcome, gate, prepared, memo, progress)
    return outcome


def _auto_exclude(outcome: GateOutcome, gate: GateInputs, prepared: PreparedModels,
                  memo: list[dict[str, np.ndarray]], progress: ProgressFn | None) -> GateOutcome:
    """The fewest layers (along the sensitivity ranking) to keep out of INT8 for the gate to pass."""
    settings = gate.settings
    builder = gate.builder(prepared.get())
    placed = outcome.placed
    tried: dict[frozenset[Key], tuple[Candidate | None, Accuracy]] = {}

    def passes(without: frozenset[Key]) -> bool:
        cand = builder.build([p for p in placed if (p.graph, p.node) not in without])
        acc = cand.accuracy(gate.reference, gate.samples, settings.top1, None, memo)
        ok = not violations(list(acc.stats), settings.thresholds)
        tried[without] = (cand if ok else None, acc)  # only a passing one may be kept
        if progress:
            progress("auto-exclude", len(tried), None)
        return ok

    found = fewest_exclusions([e.key for e in outcome.sensitivity], passes)
    if found is None:
        return replace(outcome, checks=len(tried))
    kept, acc = tried[frozenset(found)]
    assert kept is not None
    ops = {e.key: e.op_type for e in outcome.sensitivity}
    skips = tuple(Skip(g, node, ops.get((g, node), ""), "kept out of INT8 by --auto-exclude: the gate passes "
                       "without it") for g, node in found)
    return replace(outcome, candidate=kept, placed=tuple(p for p in placed if (p.graph, p.node) not in set(found)),
                   accuracy=acc.stats, samples=acc.samples, worst=acc.worst, violations=(), excluded=found, checks=len(tried), skips=skips)
