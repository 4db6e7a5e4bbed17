"""The INT8 stage's report, its verdict in words, and the errors that stop it (exit 7, 8 and 11).

The verdict is a claim (:mod:`trtconv.precision.int8.claim`): "passed" says what share of new samples
meets the limit, at what confidence, from how many judged samples; a run whose judged samples cannot
support that claim is refused (exit 11) or, on the explicit opt-in, marked "unverified".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from trtconv.errors import AccuracyError, DataError, PrecisionNotAchievedError, WithResult
from trtconv.precision.bn_fold import FoldedBatchNorm
from trtconv.precision.fp16 import Fp16Report
from trtconv.precision.int8.accuracy import WorstSample
from trtconv.precision.int8.bias import BiasCorrection
from trtconv.precision.int8.calib_cache import CacheInfo
from trtconv.precision.int8.choice import CalibrationOption
from trtconv.precision.int8.claim import Claim
from trtconv.precision.int8.gate import AUTO_EXCLUDED, ShareLimit
from trtconv.precision.int8.parameters import Int8Settings
from trtconv.precision.int8.per_tensor import PerTensorChoice
from trtconv.precision.int8.qdq import Placement, Skip
from trtconv.precision.int8.sensitivity import LayerError
from trtconv.precision.int8.smooth import Smoothing
from trtconv.reference import OutputStats, Thresholds

WORST_NAMED = 3  # layers a failing gate names
FP16_RETRY = ("--precision", "fp16")  # where INT8 is out of reach, the command that builds: FP16 (its own gate)


def gate_verdict(passed: bool | None, claim: Claim | None, unverified: bool = False, samples: int = 0) -> str:
    """"passed on n=45 judged samples: ...", "failed on n=45 judged samples", "unverified: ...", "not checked"."""
    if passed is False:
        if claim is None:
            return f"failed on n={samples} samples"
        n = claim.judged
        return f"failed on n={n} judged samples" + (
            f" ({claim.judged - claim.meeting} below the limit)" if claim is not None and claim.meeting < n else "")
    if passed and claim is not None:
        missed = claim.judged - claim.meeting  # a pass may count a miss or two: the bound allows for them
        return (f"passed on n={claim.judged} judged samples{f' ({missed} below the limit)' if missed else ''}: at least "
                f"{claim.bound:.1%} of new samples meet the limit at {claim.confidence:.0%} confidence")
    if unverified:
        return "unverified: " + (claim.statement() if claim is not None and claim.judged else
                                 "nothing held out to judge on")
    return "not checked"


def parts_line(parts: Mapping[str, int], refused: bool) -> str:
    """The samples per part in words, as the text and the HTML report print them. ``refused``: the run stopped
    before the judgement (exit 8): the judging part was set aside and never judged (its count still said)."""
    order = ("calibration", "selection", "judging")  # as drawn (a JSON document may have them sorted)
    counts = ", ".join(f"{k} {parts[k]}" for k in (*[k for k in order if k in parts], *sorted(set(parts) - set(order))))
    if refused and parts.get("judging"):
        return f"{counts} (the judging part set aside, not judged: refused before the judgement)"
    if parts.get("judging"):
        return f"{counts} (drawn at random, a source at a time; nothing that chooses reads the judging part)"
    return counts + (" (refused before any judging)" if refused else " (none held out to judge on)")


@dataclass(frozen=True)
class Int8Report:
    method: str
    placed: tuple[Placement, ...]
    skipped: tuple[Skip, ...]
    scales: dict[str, float]
    cache: CacheInfo
    calibration_runs: int  # ORT runs spent calibrating: 0 when the cache was used
    calibration_seconds: float
    opset_upgrade: tuple[int, int] | None
    accuracy: tuple[OutputStats, ...] = ()
    accuracy_samples: int = 0
    violations: tuple[str, ...] = ()
    clip_guarded: tuple[str, ...] = ()  # entropy thresholds the clip guard raised (this run only)
    checked_on: str | None = None  # "held-out" | "calibration" samples, None: accuracy not checked
    thresholds: Thresholds = field(default_factory=Thresholds)
    remainder: str = "fp32"
    fp16: Fp16Report | None = None  # the FP16 remainder's conversion (what stayed FP32 and why)
    folded_batchnorms: tuple[FoldedBatchNorm, ...] = ()
    sensitivity: tuple[LayerError, ...] = ()  # worst first
    auto_excluded: tuple[str, ...] = ()  # layers --auto-exclude kept out of INT8
    gate_checks: int = 0  # candidate models the auto-exclude search ran
    # no candidate within the share met the limit on every selection sample: (meeting, samples) of the one judged,
    # which met it on at least the claim's share of them (gate._within_claim)
    selection_share: tuple[int, int] | None = None
    worst_samples: tuple[WorstSample, ...] = ()  # each output's worst held-out sample
    gate_evaluations: int = 0  # full-model ONNX Runtime passes over the held-out samples
    chosen_method: str = ""  # method "auto": the candidate kept ("cache": the cached choice)
    calibration_choice: tuple[CalibrationOption, ...] = ()  # method "auto": every candidate and its score
    per_tensor: PerTensorChoice | None = None  # method "auto": the per-tensor mix (tensor -> candidate it took)
    bias_correction: BiasCorrection | None = None  # method "auto": the bias correction measured, and if kept
    smoothing: Smoothing | None = None  # method "auto": the SmoothQuant migration measured, and if kept
    sensitivity_sessions: int = 0  # of them, the per-layer error's (1; 4 with weights on disk)
    claim: Claim | None = None  # what the judged samples support (None: nothing judged)
    unverified: bool = False  # built on the opt-in although the judged samples cannot support the claim
    parts: tuple[tuple[str, int], ...] = ()  # samples per part: calibration, selection, judging (set aside: exit 8
    # stops before judging them, ``accuracy_samples`` 0 then)
    int8_share: float = 0.0  # of the Conv/ConvTranspose/MatMul/Gemm layers, the share left in INT8
    share_needed_below: float | None = None  # exit 8: the gate would need an INT8 share of at most this
    phases: tuple[tuple[str, float], ...] = ()  # seconds per phase (calibrate, choose, ..., judge)

    @property
    def passed(self) -> bool | None:
        """True only when the judged samples support the claim; None when that was not checked (or unverified)."""
        if self.violations:
            return False
        return True if self.checked_on == "held-out" and self.claim is not None and self.claim.holds else None

    @property
    def weak(self) -> bool:
        """The old name of ``unverified`` (the JSON keeps both)."""
        return self.unverified

    @property
    def verdict(self) -> str:
        """The gate's verdict in words: the claim a pass makes and how many judged samples it rests on."""
        return gate_verdict(self.passed, self.claim, self.unverified, self.accuracy_samples)

    def to_json(self) -> dict[str, Any]:
        excluded = {(s.graph, s.node) for s in self.skipped if s.reason.startswith(AUTO_EXCLUDED)}
        return {
            "method": self.method,
            "placed": [p.to_json() for p in self.placed],
            "skipped": [s.to_json() for s in self.skipped],
            "scales": dict(sorted(self.scales.items())),
            "cache": self.cache.to_json(),
            "calibration_runs": self.calibration_runs,
            "calibration_seconds": round(self.calibration_seconds, 3),
            "opset_upgrade": list(self.opset_upgrade) if self.opset_upgrade else None,
            "accuracy": [s.to_json() for s in self.accuracy],
            "accuracy_samples": self.accuracy_samples,
            "violations": list(self.violations),
            "clip_guarded": list(self.clip_guarded),
            "checked": self.checked_on == "held-out",
            "accuracy_check": self.checked_on or "not checked",
            "thresholds": self.thresholds.to_json(),
            "remainder": self.remainder,
            "fp16_remainder": None if self.fp16 is None else {
                k: v for k, v in self.fp16.to_json().items() if k not in ("accuracy", "violations", "passed", "samples")},
            "folded_batchnorms": [f.__dict__ for f in self.folded_batchnorms],
            "sensitivity": [{**e.to_json(), "excluded": e.key in excluded} for e in self.sensitivity],
            "auto_excluded": list(self.auto_excluded),
            "gate_checks": self.gate_checks,
            "selection_share": None if self.selection_share is None else dict(
                zip(("meeting", "samples"), self.selection_share)),
            "gate_evaluations": self.gate_evaluations,
            "chosen_method": self.chosen_method or self.method,
            "calibration_choice": [o.to_json() for o in self.calibration_choice],
            "bias_correction": None if self.bias_correction is None else self.bias_correction.to_json(),
            "smoothing": None if self.smoothing is None else self.smoothing.to_json(),
            "per_tensor_methods": None if self.per_tensor is None else dict(sorted(self.per_tensor.methods.items())),
            "sensitivity_sessions": self.sensitivity_sessions,
            "passed": self.passed,
            "held_out_samples": self.accuracy_samples if self.checked_on == "held-out" else 0,
            "worst_samples": [w.to_json() for w in self.worst_samples],
            "weak": self.weak,
            "unverified": self.unverified,
            "claim": None if self.claim is None else self.claim.to_json(),
            "samples_per_part": dict(self.parts),
            "int8_share": round(self.int8_share, 4),
            "share_needed_below": None if self.share_needed_below is None else round(self.share_needed_below, 4),
            "phase_seconds": {k: round(v, 3) for k, v in self.phases},
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Int8Result:
    model: onnx.ModelProto
    report: Int8Report


class Int8ShareError(WithResult, PrecisionNotAchievedError):
    """Auto-exclude stopped: the gate needs more layers out of INT8 than ``min_share`` allows (exit 8)."""

    result: Int8Result


class Int8AccuracyError(WithResult, AccuracyError):
    """Accuracy below the thresholds; ``result`` still holds the model and the full report."""

    result: Int8Result


class Int8EvidenceError(WithResult, DataError):
    """Too few judged samples to support the claim a pass makes (exit 11); nothing is written. ``result``: the
    model and report when the run got as far as judging (None when refused before calibrating)."""

    result: Int8Result | None


def worst_layers(errors: Sequence[LayerError], k: int = WORST_NAMED) -> str:
    return ", ".join(f"{e.node} ({e.op_type}, error {e.nmse:.3g})" for e in errors[:k])


def too_few_samples(judged: int, needed: int, total: int | None = None, total_needed: int | None = None,
                    result: Int8Result | None = None, misses: int = 0, counted: str = "judged sample(s)",
                    ) -> Int8EvidenceError:
    """The one line when the judged samples cannot support the claim: how many it would take.

    ``counted``: what ``judged`` counts (:meth:`Claim.counted`: samples alike within their source weigh as fewer
    independent ones, and then more sources, not more variants of the same ones, are what helps)."""
    more = f"; give at least {total_needed} samples (now {total})" if total is not None and total_needed else ""
    if counted != "judged sample(s)":
        more += ("; give samples from more sources (the files of one subfolder are one source: a page's lines, a "
                 "speaker's clips), or, where subfolders are classes of independent files, --sources files")
    missed = f", {misses} of them below the limit," if misses else ""
    return Int8EvidenceError(
        f"INT8 not verified: {judged} {counted}{missed} cannot support the claim a pass makes "
        f"({needed} judged samples, all meeting the limit, are needed{'; more with misses' if misses else ''}){more}",
        result,
        hint="--int8-unverified, to build it marked unverified; or give more sample data (docs/precision.md, "
             "'What a pass promises')",
        retry=("--int8-unverified", ""),
    )


def gate_failed(result: Int8Result, settings: Int8Settings) -> Int8AccuracyError:
    bad, errors = result.report.violations, result.report.sensitivity
    worst = worst_layers(errors)
    tried_note = " even after --auto-exclude tried keeping layers out of INT8" if settings.auto_exclude else ""
    return Int8AccuracyError(
        f"INT8 accuracy below the thresholds{tried_note}: {bad[0]}"
        + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
        + (f"; the layers adding the most error: {worst}" if worst else "")
        + f"; INT8 share {result.report.int8_share:.0%}: a lower one is needed",
        result,
        hint="--precision fp16, or " + ("drop --no-auto-exclude (--auto-exclude, the default, keeps the fewest layers out of INT8 until "
                      "the gate passes), " if not settings.auto_exclude else "")
        + "--exclude the layers named, calibrate on more representative data, or try --calib-method percentile",
        retry=FP16_RETRY,
    )


def share_unreachable(result: Int8Result, share: ShareLimit) -> Int8ShareError:
    r = result.report
    below = f"{r.share_needed_below:.0%}" if r.share_needed_below is not None else f"{share.min_share:.0%}"
    worst = worst_layers(r.sensitivity)
    return Int8ShareError(
        f"INT8 needs more than {max(share.budget, 0)} of {share.compute_layers} layers excluded to pass the gate; "
        f"below the share ({share.min_share:.0%} in INT8; the gate needs at most {below}); use fp16 or lower it "
        f"(stopped after {r.gate_checks} candidate check(s), {r.gate_evaluations} full-model evaluations)"
        + (f"; the layers adding the most error: {worst}" if worst else ""),
        result,
        hint="--precision fp16, or a lower --min-precision-share; --sensitivity lists the layers to blame",
        retry=FP16_RETRY,
    )
