"""Stage 7, bench: latency and throughput statistics from raw timings."""

from trtconv.bench.run import (
    BenchResult,
    BenchSettings,
    bench_engine,
)

__all__ = [
    "BenchResult",
    "BenchSettings",
    "bench_engine",
]
