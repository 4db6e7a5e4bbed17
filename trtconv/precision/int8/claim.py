"""What "passed" promises: a statement about new samples from the same source, with its confidence.

Each judged sample either meets the gate's cosine limit on every gated output or misses it. With ``n``
judged samples of which ``k`` miss, the one-sided Clopper-Pearson bounds give the share of new samples
that meet it at the stated confidence: the gate passes when the lower bound reaches the claimed share,
fails when the upper bound is below it, and otherwise the samples are too few to tell.
With no miss the bound is ``(1 - confidence) ** (1 / n)``: claiming 95 % at 90 % confidence takes 45
judged samples, all meeting the limit (docs/precision.md, "What a pass promises").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trtconv.reference import Thresholds

CLAIM_SHARE = 0.95  # the share of new samples a pass promises meet the limit ...
CLAIM_CONFIDENCE = 0.90  # ... at this confidence


def lower_bound(meeting: int, judged: int, confidence: float = CLAIM_CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson lower bound of the meeting share: the ``p`` at which ``meeting`` or more of
    ``judged`` would happen with probability ``1 - confidence`` (0 when nothing met; bisection, no SciPy)."""
    if judged <= 0 or meeting <= 0:
        return 0.0
    alpha = 1.0 - confidence
    if meeting == judged:
        return alpha ** (1.0 / judged)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _at_least(meeting, judged, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def upper_bound(meeting: int, judged: int, confidence: float = CLAIM_CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper bound of the meeting share (1 when every judged sample met it)."""
    if judged <= 0:
        return 1.0
    return 1.0 - lower_bound(judged - meeting, judged, confidence)


def _at_least(x: int, n: int, p: float) -> float:
    """P(X >= x) for X ~ Binomial(n, p)."""
    if p <= 0:
        return 0.0 if x > 0 else 1.0
    if p >= 1:
        return 1.0
    logp, logq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * logp
                                 + (n - i) * logq) for i in range(x, n + 1)))


def samples_needed(share: float = CLAIM_SHARE, confidence: float = CLAIM_CONFIDENCE) -> int:
    """Judged samples, all meeting the limit, that support the claim: the least n with ``(1-conf)^(1/n) >= share``."""
    return math.ceil(math.log(1.0 - confidence) / math.log(share) - 1e-9)


@dataclass(frozen=True)
class Claim:
    """The judged samples' evidence and what it supports."""

    judged: int
    meeting: int  # judged samples whose every gated output meets its cosine limit
    share: float = CLAIM_SHARE
    confidence: float = CLAIM_CONFIDENCE
    misses: tuple[str, ...] = ()  # the judged samples that missed (their origins)

    @property
    def bound(self) -> float:
        return lower_bound(self.meeting, self.judged, self.confidence)

    @property
    def holds(self) -> bool:
        """The evidence supports the claim: the lower bound reaches the claimed share."""
        return self.judged > 0 and self.bound >= self.share

    @property
    def fails(self) -> bool:
        """The evidence contradicts the claim: even the upper bound of the meeting share is below it."""
        return self.judged > 0 and upper_bound(self.meeting, self.judged, self.confidence) < self.share

    @property
    def too_few(self) -> bool:
        """Neither: too few judged samples to tell (every one met the limit, or a few missed)."""
        return not self.holds and not self.fails

    @property
    def needed(self) -> int:
        return samples_needed(self.share, self.confidence)

    def statement(self) -> str:
        """What the evidence supports, in words."""
        return (f"{self.meeting} of {self.judged} judged samples meet the limit: at least {self.bound:.1%} of new "
                f"samples will, at {self.confidence:.0%} confidence (the claim: {self.share:.0%}, "
                f"{self.needed} judged samples all meeting it)")

    def to_json(self) -> dict[str, Any]:
        return {"judged": self.judged, "meeting": self.meeting, "share": self.share, "confidence": self.confidence,
                "bound": float(f"{self.bound:.6f}"), "needed": self.needed, "holds": self.holds,
                "misses": list(self.misses)}


def judge_samples(per_sample: Mapping[str, Sequence[float]], origins: Sequence[str], thresholds: Thresholds,
                  share: float = CLAIM_SHARE, confidence: float = CLAIM_CONFIDENCE) -> Claim:
    """The claim from each judged sample's cosine per output (``per_sample``: output -> cosine per sample)."""
    n = len(origins)
    meets = [True] * n
    for output, cosines in per_sample.items():
        limits = thresholds.for_output(output)
        if limits is None or limits.min_cosine is None:
            continue
        for i, c in enumerate(cosines[:n]):
            if not c >= limits.min_cosine:
                meets[i] = False
    return Claim(n, sum(meets), share, confidence, tuple(o for o, ok in zip(origins, meets) if not ok))
