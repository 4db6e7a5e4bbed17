"""``trtconv bench``: engine latency and throughput."""

from __future__ import annotations

from pathlib import Path

import click

from trtconv.api import BenchResult, BenchSettings, bench_engine, manifest_path, parse_shapes
from trtconv.api import update_manifest as update
from trtconv.cli.options import engine_trt_option, json_option, shapes_option
from trtconv.cli.output import print_json, stdout_console
from trtconv.errors import UsageError


def print_result(engine: Path, result: BenchResult) -> None:
    s = result.stats
    console = stdout_console()
    graph = "CUDA graph" if result.cuda_graph else f"no CUDA graph ({result.cuda_graph_note})"
    shapes = ", ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in result.shapes.items())
    console.print(f"{engine.name}: {s.iterations} iterations after {result.settings.warmup} warm-up, {graph}; {shapes}",
                  markup=False)
    console.print(f"latency ms: median {s.median_ms:.3f}  p90 {s.p90_ms:.3f}  p99 {s.p99_ms:.3f}  "
                  f"mean {s.mean_ms:.3f}  min {s.min_ms:.3f}  max {s.max_ms:.3f}", markup=False)
    g = result.gpu
    console.print(f"GPU time ms:   median {g.median_ms:.3f}  p90 {g.p90_ms:.3f}  p99 {g.p99_ms:.3f}", markup=False)
    console.print(f"throughput: {s.throughput_qps:.1f} inferences/s ({s.throughput_samples:.1f} samples/s at batch "
                  f"{s.batch})", markup=False)


@click.command("bench")
@click.argument("engine", type=click.Path(path_type=Path, dir_okay=False))
@shapes_option
@click.option("--warmup", type=int, default=20, show_default=True, help="Untimed runs first.")
@click.option("--iterations", type=int, default=200, show_default=True, help="Timed runs.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Replay the engine as a CUDA graph where it can be captured.")
@click.option("--plugins", "plugins", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Plugin library the engine needs (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--update-manifest", is_flag=True, help="Record the result in ENGINE.json.")
@engine_trt_option
@json_option
def bench(engine: Path, shapes: str | None, warmup: int, iterations: int, cuda_graph: bool,
          plugins: tuple[Path, ...], seed: int, update_manifest: bool, trt: str | None, as_json: bool) -> None:
    """Time ENGINE: warm-up, then median/p90/p99 latency and throughput.

    Dynamic inputs run at the opt shape of profile 0 unless --shapes says otherwise.
    Exit 0: timed; 9: TensorRT or GPU missing; 2: bad flags, or --shapes outside the profile.
    """

    settings = BenchSettings(warmup=warmup, iterations=iterations, cuda_graph=cuda_graph, seed=seed)
    shape_map = parse_shapes(shapes)
    if not engine.is_file():
        raise UsageError(f"{engine}: no such file")
    result = bench_engine(engine, shapes=shape_map, settings=settings, plugin_libraries=tuple(plugins),
                          target=trt)
    if update_manifest:

        update(manifest_path(engine), bench=result.to_json())
    if as_json:
        print_json(result.to_json())
    else:
        print_result(engine, result)
