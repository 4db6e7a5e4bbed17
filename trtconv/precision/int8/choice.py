"""Calibration chosen by the data (``method="auto"``): every candidate method's scales come from
one calibration pass (the same histograms), each candidate model is measured against FP32 on
the selection samples (never the judging ones), and the one that agrees best is kept.

The score is the gate's own measure: first whether the candidate passes the thresholds, then
its worst output cosine. Ties keep the earlier candidate (TensorRT's entropy first). With the early
stop, a candidate is measured only until it cannot beat the best so far (:class:`~trtconv.precision.int8.
accuracy.Cutoff`: the best's hardest samples first): the same one is chosen, and a stopped candidate's
score is what was known when it stopped (``stopped``: its cosine is an upper bound).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from trtconv.precision.int8.accuracy import Accuracy, Cutoff
from trtconv.precision.int8.candidate import CandidateBuilder, finalize_placements
from trtconv.precision.int8.gate import agrees
from trtconv.precision.int8.parameters import Int8Settings, ProgressFn
from trtconv.precision.int8.prepare import Pair, PreparedModels
from trtconv.precision.int8.qdq import Placement
from trtconv.precision.int8.scale_fed import ScaleFed, scale_fed
from trtconv.reference import Thresholds

# measured first: the calibration that minimizes each tensor's own quantization error, chosen on ddddocr's CRNN
# and PP-OCR cls; its score is the bar every other candidate is measured against, so those it beats stop sooner.
# Not an order of preference: the choice is that of the order given (ties keep the earlier; the search ends at
# the first candidate with margin). So the first candidate, which may end the search, is measured before it only
# while it can still pass with margin (``margin_bar``), and an ``AHEAD`` with margin sets no bar (it could end the
# search where the order given ends sooner)
AHEAD = "mse"
MARGIN = 10  # a candidate with (1 - cosine) below a tenth of (1 - the limit) stops the search


@dataclass(frozen=True)
class CalibrationOption:
    """One candidate calibration and how its model did on the selection samples."""

    label: str  # "entropy", "percentile-99.99", "minmax", "mse"
    worst_cosine: float  # the lowest cosine over the outputs
    passes: bool  # meets the gate's thresholds
    chosen: bool = False
    stopped: bool = False  # measured until it could not win: worst_cosine is an upper bound, passes "could"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"method": self.label, "worst_cosine": float(f"{self.worst_cosine:.8f}"),
                                  "passes": self.passes, "chosen": self.chosen}
        if self.stopped:
            out["stopped_early"] = True
        return out


def scored(label: str, acc: Accuracy, thresholds: Thresholds) -> CalibrationOption:
    """A measured candidate's option: its score, or what was known of it when a cutoff stopped it."""
    if acc.stopped:
        return CalibrationOption(label, acc.bound, acc.could_pass, stopped=True)
    return CalibrationOption(label, min((st.cosine for st in acc.stats), default=1.0), agrees(acc, thresholds))


def cutoff(best: tuple[CalibrationOption, Accuracy] | None, thresholds: Thresholds, on: bool) -> Cutoff | None:
    """The score the next candidate must beat (``on``: the early stop is on, and a best was measured in full)."""
    if not on or best is None or best[1].stopped:
        return None
    option, acc = best
    return Cutoff(option.passes, option.worst_cosine, thresholds, acc.hardest_first())


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
    early_stop: bool = False,
) -> tuple[str, tuple[CalibrationOption, ...], tuple[int, ...]]:
    """The label of the candidate whose model agrees best with FP32, every candidate measured, and the samples
    hardest for the best, hardest first (``memo``: the reference's outputs, computed once and kept there for
    later candidates; ``early_stop``: stop at the first candidate that passes with margin, :func:`with_margin`;
    ``settings.early_stop``: each candidate measured only until it cannot win)."""
    memo = [] if memo is None else memo
    items = list(candidates.items())
    results: dict[int, tuple[CalibrationOption, Accuracy]] = {}
    fed: list[ScaleFed | None] = []  # made with the first candidate measured

    def measure(k: int, stop: Cutoff | None) -> tuple[CalibrationOption, Accuracy]:
        label, scales = items[k]
        placed, _ = finalize_placements(placements, scales, absent)
        if not fed:
            fed.append(scale_fed(builder(prepared.get(), scales), placed)
                       if len(items) > 1 and settings.shared_sessions else None)
        if fed[0] is not None and fed[0].fits(placed):
            acc = fed[0].accuracy(scales, reference, samples, settings.top1, memo, stop)
        else:
            acc = builder(prepared.get(), scales).build(placed).accuracy(reference, samples, settings.top1, None, memo,
                                                                         stop)
        if progress:
            progress("choose-calibration", len(results) + 1, len(items))
        return scored(label, acc, settings.thresholds), acc

    def better(a: tuple[CalibrationOption, Accuracy], b: tuple[CalibrationOption, Accuracy] | None) -> bool:
        return b is None or (a[0].passes, a[0].worst_cosine) > (b[0].passes, b[0].worst_cosine)

    def margin(r: tuple[CalibrationOption, Accuracy]) -> bool:
        return early_stop and with_margin(r[0], settings.thresholds)

    best: tuple[CalibrationOption, Accuracy] | None = None
    ahead = next((k for k, (label, _) in enumerate(items) if label == AHEAD), None) if settings.early_stop else None
    if ahead:  # ``AHEAD`` first, its bar on every other: they stop sooner (see ``AHEAD``)
        bar = margin_bar(settings.thresholds) if early_stop else None
        if bar is not None:  # the first in the order given may end the search: measured while it still could
            first = measure(0, bar)
            if not first[1].stopped:
                results[0] = first
        if 0 not in results or not margin(results[0]):
            # against the first when it was measured in full; else only while it still passes: a bar that fails
            # stops nothing it matters to stop (PP-OCRv4 rec: every candidate misses a sample)
            guess = measure(ahead, cutoff(results.get(0), settings.thresholds, True) or Cutoff(
                True, -2.0, settings.thresholds))
            if 0 in results or not guess[1].stopped:  # stopped by a bar not in play: measured again in its turn
                results[ahead] = guess
            if not guess[1].stopped and not margin(guess) and better(guess, results.get(0)):
                best = guess  # with margin it could end the search where the order given ends sooner
    played: list[int] = []  # the candidates in play, in the order given
    for k in range(len(items)):
        if k not in results:
            results[k] = measure(k, cutoff(best, settings.thresholds, settings.early_stop))
        played.append(k)
        if better(results[k], best):
            best = results[k]
        if margin(results[k]):
            break  # the rest could only win by a hair: not worth a full-model evaluation each
    label, marked = best_option([results[k][0] for k in played])
    chosen = played[[o.chosen for o in marked].index(True)]
    return label, marked, results[chosen][1].hardest_first()


def margin_bar(thresholds: Thresholds) -> Cutoff | None:
    """The score a candidate must be able to reach to pass with margin (:func:`with_margin`): measured against it,
    one that cannot stops (None: no cosine limit, no margin)."""
    limit = thresholds.min_cosine
    return None if limit is None else Cutoff(True, 1 - (1 - limit) / MARGIN, thresholds)


def with_margin(option: CalibrationOption, thresholds: Thresholds) -> bool:
    """A candidate that passes with a tenth of the cosine limit's room to spare (0.999 for 0.99): choosing on,
    or correcting it further, cannot change the verdict, only cost time (the early stop)."""
    limit = thresholds.min_cosine
    return limit is not None and option.passes and option.worst_cosine >= 1 - (1 - limit) / MARGIN


def best_option(options: Sequence[CalibrationOption]) -> tuple[str, tuple[CalibrationOption, ...]]:
    """The label of the option that passes with the highest worst cosine (ties: the earlier), every option
    marked chosen or not."""
    best = max(range(len(options)), key=lambda i: (options[i].passes, options[i].worst_cosine, -i))
    chosen = tuple(replace(o, chosen=i == best) for i, o in enumerate(options))
    return options[best].label, chosen
