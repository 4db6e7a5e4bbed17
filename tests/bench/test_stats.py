"""Latency statistics: nearest-rank percentiles and throughput from raw timings."""

from __future__ import annotations

import pytest

from trtconv.bench.run import BenchSettings
from trtconv.bench.stats import percentile, summarize
from trtconv.errors import UsageError


def test_nearest_rank_percentiles_are_measured_values():
    xs = [float(i) for i in range(1, 101)]  # 1..100 ms
    assert percentile(xs, 50) == 50.0
    assert percentile(xs, 90) == 90.0
    assert percentile(xs, 99) == 99.0
    assert percentile(xs, 100) == 100.0
    assert percentile([7.0], 99) == 7.0


def test_summary_of_known_timings():
    s = summarize([4.0, 1.0, 2.0, 3.0], batch=8)
    assert (s.min_ms, s.median_ms, s.max_ms, s.mean_ms) == (1.0, 2.5, 4.0, 2.5)
    assert s.p90_ms == 4.0 and s.p99_ms == 4.0
    assert s.throughput_qps == pytest.approx(400.0)
    assert s.throughput_samples == pytest.approx(3200.0)
    assert s.to_json()["iterations"] == 4


def test_bad_inputs_are_refused():
    with pytest.raises(UsageError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])
    with pytest.raises(UsageError, match="iterations"):
        BenchSettings(iterations=0)
