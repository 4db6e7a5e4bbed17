"""``trtconv bench``: time an engine on reproducible inputs (TensorRT loaded lazily)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtconv.bench.stats import LatencyStats, summarize
from trtconv.errors import UsageError
from trtconv.trt import EngineRunner, profile_shapes


@dataclass(frozen=True)
class BenchSettings:
    warmup: int = 20
    iterations: int = 200
    cuda_graph: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise UsageError("--iterations must be at least 1")
        if self.warmup < 0:
            raise UsageError("--warmup must not be negative")


@dataclass(frozen=True)
class BenchResult:
    stats: LatencyStats  # host latency: launch to results ready
    gpu: LatencyStats  # GPU time between CUDA events around the work
    cuda_graph: bool
    cuda_graph_note: str | None
    shapes: dict[str, list[int]]
    settings: BenchSettings

    def to_json(self) -> dict[str, Any]:
        return {
            **self.stats.to_json(),
            "gpu_ms": {k: v for k, v in self.gpu.to_json().items() if k.endswith("_ms")},
            "cuda_graph": self.cuda_graph,
            "cuda_graph_note": self.cuda_graph_note,
            "shapes": self.shapes,
            "warmup": self.settings.warmup,
            "seed": self.settings.seed,
        }


def random_engine_inputs(inputs: list[Any], shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for the engine's own I/O description (dynamic dims from ``shapes``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in inputs:
        shape = shapes.get(t.name, t.shape)
        if any(d < 0 for d in shape):
            raise UsageError(
                f"engine input {t.name!r} has dynamic dims {list(t.shape)}",
                hint=f"pass --shapes {t.name}:" + "x".join(str(d) if d >= 0 else "N" for d in t.shape),
            )
        if t.dtype.kind == "f":
            feeds[t.name] = np.asarray(rng.standard_normal(shape), dtype=t.dtype)  # 0-d: an array
        elif t.dtype.kind == "b":
            feeds[t.name] = np.asarray(rng.integers(0, 2, size=shape), dtype=bool)
        else:
            feeds[t.name] = np.asarray(rng.integers(0, 4, size=shape), dtype=t.dtype)
    return feeds


def bench_engine(engine_path: Path, *, shapes: dict[str, tuple[int, ...]], settings: BenchSettings,
                 plugin_libraries: tuple[Path, ...] = (), target: str | None = None) -> BenchResult:
    """``target``: the ``--trt`` the engine was built for (None: its manifest, else its header)."""
    runner = EngineRunner(engine_path, plugin_libraries, target=target)
    # Dynamic inputs without --shapes run at profile 0's opt shape: what the engine was tuned for.
    opt = {name: mmo[1] for name, mmo in profile_shapes(runner).items()}
    feeds = random_engine_inputs(runner.inputs, {**opt, **shapes}, settings.seed)
    runner.prepare(feeds)
    host, gpu, why_not = runner.time_enqueues(warmup=settings.warmup, iterations=settings.iterations,
                                              cuda_graph=settings.cuda_graph)
    batch = int(next(iter(feeds.values())).shape[0]) if feeds and next(iter(feeds.values())).ndim else 1
    return BenchResult(summarize(host, batch=batch), summarize(gpu, batch=batch), why_not is None, why_not,
                       {k: list(v.shape) for k, v in feeds.items()}, settings)
