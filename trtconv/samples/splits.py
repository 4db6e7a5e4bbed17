"""Random, source-aware splits: calibration, selection and judging parts that cannot flatter the verdict.

Samples are drawn at random (seeded), never by file order: files sorted by name cluster (one source's
variants, one page's lines), and the last files held out resemble each other more than they resemble the
next input. Samples of one source (:func:`trtconv.samples.sources.sample_groups`) stay in one part, so a
variant of a judged sample is never calibrated or selected on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtconv.samples.sources import SampleSet


@dataclass(frozen=True)
class Split:
    """The three parts of a sample set and how they were drawn."""

    calibration: SampleSet
    selection: SampleSet | None  # None: nothing to choose (or too few samples)
    judging: SampleSet | None  # None: nothing held out to judge on
    groups: int  # sources the samples came from
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {"calibration": len(self.calibration), "selection": len(self.selection or ()),
                "judging": len(self.judging or ()), "groups": self.groups, "seed": self.seed}


def draw_parts(groups: Sequence[str], judging: int, selection: int, seed: int
               ) -> tuple[list[int], list[int], list[int]]:
    """(calibration, selection, judging) sample indices: the groups in a seeded random order fill the judging part
    to ``judging`` samples, then the selection part to ``selection``; the rest calibrates (never empty: a group
    goes back from selection, then from judging, when nothing is left)."""
    labels = sorted(set(groups))
    order = [labels[i] for i in np.random.default_rng(seed).permutation(len(labels))]
    members: dict[str, list[int]] = {g: [] for g in labels}
    for i, g in enumerate(groups):
        members[g].append(i)
    parts: list[list[str]] = [[], [], []]  # judging, selection, calibration
    sizes = [0, 0]
    for g in order:
        k = 0 if sizes[0] < judging else 1 if sizes[1] < selection else 2
        parts[k].append(g)
        if k < 2:
            sizes[k] += len(members[g])
    for k in (1, 0):
        if not parts[2] and parts[k]:
            parts[2].append(parts[k].pop())
    judge, select, calib = ([i for g in part for i in members[g]] for part in parts)
    return sorted(calib), sorted(select), sorted(judge)


def split_samples(samples: SampleSet, judging: int, selection: int, seed: int) -> Split:
    """``samples`` drawn into the three parts (sizes in samples; groups are never divided)."""
    groups = samples.groups()
    index = samples.indices()
    calib, select, judge = draw_parts(groups, judging, selection, seed)
    calibration, selected, judged = (samples.subset([index[i] for i in part]) if part else None
                                     for part in (calib, select, judge))
    assert calibration is not None
    return Split(calibration, selected, judged, len(set(groups)), seed)
