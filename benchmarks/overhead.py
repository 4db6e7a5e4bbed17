"""What `trtconv build` costs on top of the TensorRT-RTX build it wraps (issue 34).

For each model, FP32, one static profile, nothing to rewrite: ``trtconv build MODEL --trt rtx``
(the whole command: start-up, check, rewrite, save, pre-flight, build, manifest) against "bare",
TensorRT-RTX's own parser + builder + serialize on the same file with the same settings (optimization
level 3, the same five compute capabilities, the same profile), as a fresh Python process each. The
two run in turn, A B A B ... (``--runs`` pairs): the ratio is taken pair by pair, and every figure is
the median, so a machine whose speed drifts (a shared one) moves both sides of a pair alike. Peak
memory is each process's own VmHWM (benchmarks/measure.py); CPU is user + system seconds (getrusage of
the children), the figure a crowded machine distorts least. The targets: wall ≤ 1.5 × (bare + 1 s) (and
the same bound on CPU), peak ≤ 1.3 × bare + 300 MiB. The stage columns are the medians of trtconv's own
stage lines.

Models: PP-OCR cls/rec/det (rapidocr, the test extra), NudeNet 320n (a YOLOv8n detector: no layout
detector ships in a wheel here), and two generated with seeded random weights
(benchmarks/overhead_models.py, the bench extra): a 6-layer BERT encoder from a transformers config
and a 176 MB U²-Net-like segmenter at 1024². Generated models are cached in ``--cache``.

    python benchmarks/overhead.py [--runs 3] [--only cls,bert6] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from measure import peak_rss  # benchmarks/measure.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# TensorRT-RTX alone, as trtconv configures it for `--trt rtx` (trtconv/trt/builder.py configure)
BARE = """
import sys
import tensorrt_rtx as trt
path, out, shapes = sys.argv[1:4]
logger = trt.Logger(trt.Logger.ERROR)
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
if not parser.parse_from_file(path):
    raise SystemExit("parse failed")
config = builder.create_builder_config()
config.builder_optimization_level = 3
config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
ccs = ("SM80", "SM86", "SM89", "SM120", "SM121")
config.num_compute_capabilities = len(ccs)
for i, cc in enumerate(ccs):
    config.set_compute_capability(getattr(trt.ComputeCapability, cc), i)
profile = builder.create_optimization_profile()
for spec in filter(None, shapes.split(",")):
    name, dims = spec.split(":")
    d = [int(x) for x in dims.split("x")]
    profile.set_shape(name, d, d, d)
if shapes:
    config.add_optimization_profile(profile)
data = builder.build_serialized_network(network, config)
if data is None:
    raise SystemExit("build failed")
with open(out, "wb") as fh:
    fh.write(bytes(data))
"""
STAGE = re.compile(r"^trtconv: (\w[\w-]*): (done|skipped|failed)(?: \(([\d.]+) s\))?", re.M)


@dataclass(frozen=True)
class Model:
    name: str
    label: str
    path: Path
    shapes: str  # --shapes (empty: a static model)


def models(cache: Path, only: set[str]) -> list[Model]:
    from realmodels import nudenet_model, rapidocr_model

    found = [
        Model("cls", "PP-OCR orientation classifier", rapidocr_model("cls"), "x:1x3x192x192"),  # H, W share the name "?": TensorRT alone needs H = W,
        Model("rec", "PP-OCRv4 text recognizer", rapidocr_model("rec"), "x:1x3x48x320"),
        Model("det", "PP-OCRv4 text detector", rapidocr_model("det"), "x:1x3x640x640"),
        Model("nudenet", "NudeNet 320n detector (YOLOv8n)", nudenet_model(), "images:1x3x320x320"),
    ]
    generated = [("bert6", "6-layer BERT encoder (generated)", "input_ids:1x128,attention_mask:1x128"),
                 ("u2net", "U²-Net-like segmenter, 1024² (generated)", "")]
    for name, label, shapes in generated:
        if only and name not in only:
            continue
        path = cache / f"{name}.onnx"
        if not path.exists():
            import overhead_models

            cache.mkdir(parents=True, exist_ok=True)
            getattr(overhead_models, f"make_{name}")(path)
        found.append(Model(name, label, path, shapes))
    return [m for m in found if not only or m.name in only]


@dataclass
class Runs:
    wall: list[float]
    cpu: list[float]  # user + system seconds of the process and its children
    peak: list[float]
    stages: list[dict[str, float]]


def timed(cmd: list[str], env: dict[str, str], stderr_chars: int = 600) -> tuple[float, float, float, int, str]:
    """peak_rss's (peak MiB, wall s, exit code, stderr) and the command's CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss, wall, rc, err = peak_rss(cmd, env=env, stderr_chars=stderr_chars)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rss, wall, cpu, rc, err


def run_pair(model: Model, out: Path, runs: int) -> tuple[Runs, Runs, list[float]]:
    """``runs`` pairs, trtconv first then bare; each pair's wall ratio."""
    shapes = ["--shapes", model.shapes] if model.shapes else []
    ours = [sys.executable, "-m", "trtconv", "build", str(model.path), "--trt", "rtx", "-o", str(out / "t.engine"),
            "--force", *shapes]
    bare = [sys.executable, "-c", BARE, str(model.path), str(out / "b.engine"), model.shapes]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    a, b, ratios = Runs([], [], [], []), Runs([], [], [], []), []
    for _ in range(runs):
        rss_a, wall_a, cpu_a, rc_a, err_a = timed(ours, env, stderr_chars=20000)
        if rc_a != 0:
            raise SystemExit(f"{model.name}: trtconv build exited {rc_a}: {err_a[-400:]}")
        rss_b, wall_b, cpu_b, rc_b, err_b = timed(bare, env)
        if rc_b != 0:
            raise SystemExit(f"{model.name}: bare build exited {rc_b}: {err_b[-400:]}")
        a.wall.append(wall_a)
        a.cpu.append(cpu_a)
        a.peak.append(rss_a)
        a.stages.append({m.group(1): float(m.group(3) or 0) for m in STAGE.finditer(err_a)})
        b.wall.append(wall_b)
        b.cpu.append(cpu_b)
        b.peak.append(rss_b)
        ratios.append(wall_a / wall_b)
    return a, b, ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="pairs per model (A B A B ...)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "trtconv-overhead-models")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    med = statistics.median
    load = os.getloadavg()
    rows, stage_rows = [], []
    names = ("check", "rewrite", "save", "recheck", "profiles", "build")
    for model in models(args.cache, only):
        with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
            a, b, ratios = run_pair(model, Path(tmp), args.runs)
        wall_ok = med(a.wall) <= 1.5 * (med(b.wall) + 1)
        peak_ok = med(a.peak) <= 1.3 * med(b.peak) + 300
        mb = model.path.stat().st_size / 1e6
        cpu_ok = med(a.cpu) <= 1.5 * (med(b.cpu) + 1)
        rows.append(f"| {model.label} | {mb:.1f} | {med(a.wall):.2f} | {med(b.wall):.2f} | {med(ratios):.2f}× | "
                    f"{1.5 * (med(b.wall) + 1):.2f} | {'yes' if wall_ok else 'NO'} | {med(a.cpu):.2f} | "
                    f"{med(b.cpu):.2f} | {'yes' if cpu_ok else 'NO'} | {med(a.peak):.0f} | {med(b.peak):.0f} | "
                    f"{1.3 * med(b.peak) + 300:.0f} | {'yes' if peak_ok else 'NO'} |")
        stages = {n: med(s.get(n, 0.0) for s in a.stages) for n in names}
        rest = med(a.wall) - sum(stages.values())
        stage_rows.append(f"| {model.name} | " + " | ".join(f"{stages[n]:.1f}" for n in names) + f" | {rest:.1f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"load average before/after: {' '.join(f'{x:.1f}' for x in load)} / "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, {args.runs} pairs, medians\n")
    print("| model | MB | trtconv wall s | bare wall s | paired ratio | wall target s | meets | trtconv CPU s "
          "| bare CPU s | CPU meets | trtconv peak MiB | bare peak MiB | peak target MiB | meets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\ntrtconv's stage lines (median s); `rest`: the wall time outside them (interpreter start-up, imports, "
          "loading the model, the manifest)\n")
    print("| model | " + " | ".join(names) + " | rest |")
    print("|---|" + "---|" * (len(names) + 1))
    print("\n".join(stage_rows))


if __name__ == "__main__":
    main()
