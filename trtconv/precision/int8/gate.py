"""The INT8 gate: the candidate against FP32 on held-out samples, the layers to blame when it
fails, and ``auto_exclude``'s search for the fewest layers to keep out of INT8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from trtconv.precision.int8.accuracy import Accuracy, WorstSample
from trtconv.precision.int8.candidate import Candidate, CandidateBuilder
from trtconv.precision.int8.parameters import Int8Settings, ProgressFn
from trtconv.precision.int8.prepare import Pair, PreparedModels
from trtconv.precision.int8.qdq import Placement, Skip
from trtconv.precision.int8.sensitivity import (
    LayerError,
    fewest_exclusions,
    layer_errors,
    sensitivity_sessions,
)
from trtconv.reference import OutputStats, violations

Samples = Iterable[Mapping[str, np.ndarray]]
Key = tuple[str, str]  # (graph, node)
AUTO_EXCLUDED = "kept out of INT8 by --auto-exclude"  # the skip reason's start
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})  # what the INT8 share counts


@dataclass(frozen=True)
class ShareLimit:
    """``min_share`` of the model's ``compute_layers`` (Conv/ConvTranspose/MatMul/Gemm) must stay in INT8."""

    min_share: float
    compute_layers: int  # in the prepared model, subgraphs included
    int8_layers: int  # of them, quantized before any exclusion

    @property
    def budget(self) -> int:
        """How many compute layers auto-exclude may keep out of INT8 (negative: the share is missed already)."""
        return self.int8_layers - math.ceil(self.min_share * self.compute_layers - 1e-9)

    def prefix_limit(self, ranking: Sequence[LayerError]) -> int | None:
        """The longest prefix of ``ranking`` within the budget (None: no limit)."""
        if self.min_share <= 0:
            return None
        used = 0
        for k, e in enumerate(ranking):
            used += e.op_type in COMPUTE_OPS
            if used > self.budget:
                return k
        return len(ranking)


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
    evaluations: int = 0  # full-model ONNX Runtime passes over the held-out samples (reference, candidates, shadows)
    sensitivity_sessions: int = 0  # of them, the per-layer error's
    unreachable: bool = False  # auto-exclude stopped: passing needs more layers out than the share allows


@dataclass(frozen=True)
class GateInputs:
    """What the gate reads besides the candidate: plain data, and how to build another candidate."""

    reference: onnx.ModelProto  # the FP32 model the outputs are compared with
    samples: Samples
    settings: Int8Settings
    scales: Mapping[str, float]
    runnable: Sequence[Placement]  # placements the calibration form has (sensitivity runs on it)
    builder: Callable[[Pair], CandidateBuilder]
    share: ShareLimit


def run_gate(candidate: Candidate, placed: Sequence[Placement], gate: GateInputs, prepared: PreparedModels,
             progress: ProgressFn | None) -> GateOutcome:
    """Measure ``candidate``; when it fails (or sensitivity is asked), rank the layers; when it fails and
    ``auto_exclude`` is on, search for the fewest layers to keep out of INT8."""
    settings = gate.settings
    memo: list[dict[str, np.ndarray]] = []  # the reference's outputs, kept for every candidate
    acc = candidate.accuracy(gate.reference, gate.samples, settings.top1, progress, memo)
    per_candidate = 1 + len(candidate.twins)  # sessions one candidate's accuracy runs
    candidate = replace(candidate, twins=())  # measured: what follows needs the model, not its twins
    bad = tuple(violations(list(acc.stats), settings.thresholds))
    outcome = GateOutcome(candidate, tuple(placed), acc.stats, acc.samples, acc.worst, bad,
                          evaluations=1 + per_candidate)
    if not bad and not settings.sensitivity:
        return outcome
    if progress:
        progress("sensitivity", 0, None)
    cal_model = prepared.get()[1]
    sessions = sensitivity_sessions(cal_model, gate.runnable, gate.samples)
    errors = layer_errors(cal_model, gate.runnable, gate.scales, gate.samples)
    del cal_model
    outcome = replace(outcome, sensitivity=errors, sensitivity_sessions=sessions,
                      evaluations=outcome.evaluations + sessions)
    if bad and settings.auto_exclude:
        outcome = _auto_exclude(outcome, gate, prepared, memo, progress)
        outcome = replace(outcome, evaluations=outcome.evaluations + per_candidate * outcome.checks)
    return outcome


def _auto_exclude(outcome: GateOutcome, gate: GateInputs, prepared: PreparedModels,
                  memo: list[dict[str, np.ndarray]], progress: ProgressFn | None) -> GateOutcome:
    """The fewest layers (along the sensitivity ranking) to keep out of INT8 for the gate to pass."""
    settings = gate.settings
    builder = gate.builder(prepared.get())
    placed = outcome.placed
    tried: dict[frozenset[Key], tuple[Candidate | None, Accuracy]] = {}

    def passes(without: frozenset[Key]) -> bool:
        if without in tried:
            return tried[without][0] is not None
        cand = builder.build([p for p in placed if (p.graph, p.node) not in without])
        acc = cand.accuracy(gate.reference, gate.samples, settings.top1, None, memo)
        ok = not violations(list(acc.stats), settings.thresholds)
        tried[without] = (cand if ok else None, acc)  # only a passing one may be kept
        if progress:
            progress("auto-exclude", len(tried), None)
        return ok

    limit = gate.share.prefix_limit(outcome.sensitivity)
    found = fewest_exclusions([e.key for e in outcome.sensitivity], passes, limit=limit)
    if found is None:
        return replace(outcome, checks=len(tried),
                       unreachable=limit is not None and limit < len(outcome.sensitivity))
    kept, acc = tried[frozenset(found)]
    assert kept is not None
    ops = {e.key: e.op_type for e in outcome.sensitivity}
    skips = tuple(Skip(g, node, ops.get((g, node), ""), AUTO_EXCLUDED + ": the gate passes without it")
                  for g, node in found)
    return replace(outcome, candidate=kept, placed=tuple(p for p in placed if (p.graph, p.node) not in set(found)),
                   accuracy=acc.stats, samples=acc.samples, worst=acc.worst, violations=(), excluded=found, checks=len(tried), skips=skips)
