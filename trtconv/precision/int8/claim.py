"""What "passed" promises: a statement about new samples from the same source, with its confidence.

Each judged sample either meets the gate's cosine limit on every gated output or misses it (an output of one
value per sample: its error against the output's RMS, on the cosine's scale: ``reference.one_value_cosines``). With ``n``
judged samples of which ``k`` miss, the one-sided Clopper-Pearson bounds give the share of new samples
that meet it at the stated confidence: the gate passes when the lower bound reaches the claimed share,
fails when the upper bound is below it, and otherwise the samples are too few to tell.
With no miss the bound is ``(1 - confidence) ** (1 / n)``: claiming 95 % at 90 % confidence takes 45
judged samples, all meeting the limit (docs/precision.md, "What a pass promises").

The binomial counts independent samples. Samples of one source (one page's lines, one recording's windows)
are alike: 64 lines from 4 pages are closer to 4 draws than to 64. Where the judged samples come from
several sources, their count is divided by Kish's design effect ``1 + (m - 1) * ICC`` (``m`` the size-weighted
mean source size, ``ICC`` the share of the error's variance that lies between sources, one-way ANOVA on
``log(1 - cosine)``), and is never more than the number of judged sources: the judged sources' agreement says
nothing of the sources not judged (the gate-truth benchmark: 64 good lines from 4 pages, ICC 0, and the
failing pages all among the unseen).
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

    judged: int  # independent samples the evidence weighs as (the judged samples, or fewer: see design_effect)
    meeting: int  # of those, the ones whose every gated output meets its cosine limit
    share: float = CLAIM_SHARE
    confidence: float = CLAIM_CONFIDENCE
    misses: tuple[str, ...] = ()  # the judged samples that missed (their origins)
    samples: int | None = None  # judged samples, where they weigh as fewer (else ``judged``)
    sources: int | None = None  # the sources those samples came from
    design_effect: float = 1.0

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
        return (f"{self.meeting} of {self.judged} {self.counted()} meet the limit: at least {self.bound:.1%} of new "
                f"samples will, at {self.confidence:.0%} confidence (the claim: {self.share:.0%}, "
                f"{self.needed} judged samples all meeting it)")

    def to_json(self) -> dict[str, Any]:
        return {"judged": self.judged, "meeting": self.meeting, "share": self.share, "confidence": self.confidence,
                "bound": float(f"{self.bound:.6f}"), "needed": self.needed, "holds": self.holds,
                "misses": list(self.misses), "samples": self.samples if self.samples is not None else self.judged,
                "sources": self.sources, "design_effect": float(f"{self.design_effect:.4f}")}

    def counted(self) -> str:
        """What ``judged`` counts, in words."""
        if self.samples is None or self.samples == self.judged:
            return "judged samples"
        return (f"independent judged samples ({self.samples} samples from {self.sources} sources: a source counts "
                f"once at most, design effect {self.design_effect:.1f})")


def judge_samples(per_sample: Mapping[str, Sequence[float]], origins: Sequence[str], thresholds: Thresholds,
                  share: float = CLAIM_SHARE, confidence: float = CLAIM_CONFIDENCE,
                  groups: Sequence[str] | None = None) -> Claim:
    """The claim from each judged sample's cosine per output (``per_sample``: output -> cosine per sample).

    ``groups``: each judged sample's source; samples alike within their source weigh as fewer (module doc)."""
    n = len(origins)
    meets = [True] * n
    worst = [1.0] * n
    for output, cosines in per_sample.items():
        limits = thresholds.for_output(output)
        if limits is None or limits.min_cosine is None:
            continue
        for i, c in enumerate(cosines[:n]):
            worst[i] = min(worst[i], float(c)) if c == c else -1.0
            if not c >= limits.min_cosine:
                meets[i] = False
    missed = tuple(o for o, ok in zip(origins, meets) if not ok)
    sources = len(set(groups[:n])) if groups is not None and len(groups) >= n else n
    if sources >= n:
        return Claim(n, sum(meets), share, confidence, missed)
    assert groups is not None
    deff = design_effect(worst, groups[:n])
    # never more than the sources: how alike the judged sources are says nothing of the sources not judged
    # (four good pages agree with each other however the next page is printed)
    judged = max(1, min(sources, math.floor(n / deff)))
    misses = n - sum(meets)
    misses = min(judged, max(math.ceil(misses * judged / n), 1 if misses else 0))
    return Claim(judged, judged - misses, share, confidence, missed, samples=n, sources=sources, design_effect=deff)


def design_effect(values: Sequence[float], groups: Sequence[str]) -> float:
    """Kish's design effect ``1 + (m - 1) * ICC`` of per-sample cosines clustered by source.

    ``ICC`` is the one-way ANOVA intraclass correlation of ``log(1 - cosine)``, clipped to [0, 1]; ``m`` the
    size-weighted mean source size. One source holding everything weighs as one sample (ICC taken as 1, no
    spread across sources to measure); every sample its own source gives 1."""
    n = len(values)
    members: dict[str, list[float]] = {}
    for v, g in zip(values, groups):
        members.setdefault(g, []).append(math.log(max(1.0 - v, 1e-12)))
    k = len(members)
    if n == 0 or k == n:
        return 1.0
    m = sum(len(ys) ** 2 for ys in members.values()) / n
    if k == 1:
        return float(n)
    grand = sum(sum(ys) for ys in members.values()) / n
    between = sum(len(ys) * (sum(ys) / len(ys) - grand) ** 2 for ys in members.values()) / (k - 1)
    within = sum((y - sum(ys) / len(ys)) ** 2 for ys in members.values() for y in ys) / (n - k)
    n0 = (n - m) / (k - 1)
    denominator = between + (n0 - 1) * within
    icc = 1.0 if denominator <= 0 else min(1.0, max(0.0, (between - within) / denominator))
    return 1.0 + (m - 1.0) * icc
