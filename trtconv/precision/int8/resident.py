"""Selection samples kept in memory while choosing reads them again and again.

``--calib-method auto`` measures up to six candidates on the selection samples, then the corrections and each
auto-exclude check: read from ``.npz`` files each time, loading them costs as much as a small model's runs
(PP-OCR cls: 6 ms a sample, a quarter of its runs). In memory they are read once, and can be taken in any
order (the hardest first: :class:`~trtconv.precision.int8.accuracy.Cutoff`). Only within a byte budget: large
samples stream as before, one in memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from trtconv.precision.int8.accuracy import with_origin
from trtconv.samples import sample_count

RESIDENT_BYTES = 256 << 20  # the most sample bytes kept in memory

Sample = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Resident:
    """Samples read once and kept, with where each came from."""

    items: tuple[tuple[str, Sample], ...]

    def __iter__(self) -> Iterator[Sample]:
        return (s for _, s in self.items)

    def with_origin(self) -> Iterator[tuple[str, Sample]]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def item(self, i: int) -> tuple[str, Sample]:
        return self.items[i]


def resident(samples: Iterable[Sample] | None, budget: int = RESIDENT_BYTES) -> Iterable[Sample] | None:
    """``samples`` in memory when they can be read again, counted, and fit ``budget`` bytes (judged by the
    first sample); else ``samples`` as they are."""
    if samples is None or isinstance(samples, Resident) or iter(samples) is samples:
        return samples
    n = sample_count(samples)
    if not n:
        return samples
    items: list[tuple[str, Sample]] = []
    for origin, s in with_origin(samples, "accuracy sample"):
        if not items and n * sum(np.asarray(v).nbytes for v in s.values()) > budget:
            return samples
        items.append((origin, s))
    return Resident(tuple(items))
