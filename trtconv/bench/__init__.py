"""Stage 7, bench: latency and throughput statistics from raw timings."""
