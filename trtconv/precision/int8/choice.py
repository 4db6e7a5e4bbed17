"""Calibration chosen by the data (``method="auto"``): every candidate method's scales come from
one calibration pass (the same histograms), each candidate model is measured against FP32 on
the held-out samples, and the one that agrees best is kept.

The score is the gate's own measure: first whether the candidate passes the thresholds, then
its worst output cosine. Ties keep the earlier candidate (TensorRT's entropy first). The
held-out samples both choose and judge, so a weak verdict (few samples) matters more here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from trtconv.precision.int8.candidate import CandidateBuilder, finalize_placements
from trtconv.precision.int8.parameters import Int8Settings, ProgressFn
from trtconv.precision.int8.prepare import Pair, PreparedModels
from trtconv.precision.int8.qdq import Placement
from trtconv.reference import violations


@dataclass(frozen=True)
class CalibrationOption:
    """One candidate calibration and how its model did on the held-out samples."""

    label: str  # "entropy", "percentile-99.99", "minmax", "mse"
    worst_cosine: float  # the lowest cosine over the outputs
    passes: bool  # meets the gate's thresholds
    chosen: bool = False

    def to_json(self) -> dict[str, object]:
        return {"method": self.label, "worst_cosine": float(f"{self.worst_cosine:.8f}"), "passes": self.passes,
                "chosen": self.chosen}


def choose_calibration(
    candidates: Mapping[str, Mapping[str, float]],
    placements: Sequence[Placement],
    absent: set[str],
    builder: Callable[[Pair, Mapping[str, float]], CandidateBuilder],
    prepared: PreparedModels,
    reference: onnx.ModelProto,
    samples: Iterable[Mapping[str, np.ndarray]],
    settings: Int8Settings,
    progress: ProgressFn | None = None,
    memo: list[dict[str, np.ndarray]] | None = None,
) -> tuple[str, tuple[CalibrationOption, ...]]:
    """The label of the candidate whose model agrees best with FP32, and every candidate's result
    (``memo``: the reference's outputs, computed once and kept there for later candidates)."""
    memo = [] if memo is None else memo
    options = []
    for k, (label, scales) in enumerate(candidates.items()):
        placed, _ = finalize_placements(placements, scales, absent)
        acc = builder(prepared.get(), scales).build(placed).accuracy(reference, samples, settings.top1, None, memo)
        worst = min((st.cosine for st in acc.stats), default=1.0)
        options.append(CalibrationOption(label, worst, not violations(list(acc.stats), settings.thresholds)))
        if progress:
            progress("choose-calibration", k + 1, len(candidates))
    return best_option(options)


def best_option(options: Sequence[CalibrationOption]) -> tuple[str, tuple[CalibrationOption, ...]]:
    """The label of the option that passes with the highest worst cosine (ties: the earlier), every option
    marked chosen or not."""
    best = max(range(len(options)), key=lambda i: (options[i].passes, options[i].worst_cosine, -i))
    chosen = tuple(CalibrationOption(o.label, o.worst_cosine, o.passes, i == best) for i, o in enumerate(options))
    return options[best].label, chosen
