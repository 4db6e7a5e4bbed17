"""Latency statistics from raw per-iteration timings: the numbers ``trtconv bench`` reports.

Percentiles use the nearest-rank method (the value of the ceil(p/100 * n)-th fastest
run), as trtexec does, so every reported number is a latency that was measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from trtconv.errors import UsageError


@dataclass(frozen=True)
class LatencyStats:
    iterations: int
    batch: int
    mean_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    throughput_qps: float  # inferences per second, from the mean latency
    throughput_samples: float  # throughput_qps * batch

    def to_json(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def percentile(sorted_ms: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not sorted_ms:
        raise ValueError("no timings")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} outside (0, 100]")
    rank = math.ceil(p / 100.0 * len(sorted_ms))
    return float(sorted_ms[max(rank, 1) - 1])


def summarize(latencies_ms: Sequence[float], *, batch: int = 1) -> LatencyStats:
    if not latencies_ms:
        raise UsageError("no iterations were timed", hint="pass --iterations 1 or more")
    if any(not math.isfinite(x) or x < 0 for x in latencies_ms):
        raise ValueError("latencies must be finite and non-negative")
    s = sorted(float(x) for x in latencies_ms)
    n = len(s)
    mean = sum(s) / n
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0
    qps = 1000.0 / mean if mean > 0 else 0.0
    return LatencyStats(
        iterations=n,
        batch=batch,
        mean_ms=mean,
        median_ms=median,
        p90_ms=percentile(s, 90),
        p99_ms=percentile(s, 99),
        min_ms=s[0],
        max_ms=s[-1],
        throughput_qps=qps,
        throughput_samples=qps * batch,
    )
