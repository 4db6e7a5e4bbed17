"""``trtconv check`` next to the real ONNX parser (TensorRT-RTX, CPU only) on the same files, one run.

Issue 17's bar: check within 2x the real parser's time on the bigger real models. Both run
in this process, warm (imports done, one untimed run first), best of ``--repeat``; CPU time
(process_time) is the figure to compare on a shared machine, wall time is printed too.

    python benchmarks/check_vs_parser.py [--repeat 5] [MODEL.onnx ...]

Without paths it takes the real models at hand: PP-OCRv4 det/rec, Silero VAD, and the
largest ONNX files of installed packages (ddddocr's 54 MB recognizer, when installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_models() -> list[Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from realmodels import rapidocr_model, silero_model

    found = [rapidocr_model("det"), rapidocr_model("rec"), silero_model()]
    spec = importlib.util.find_spec("ddddocr")
    if spec and spec.submodule_search_locations:
        found += sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.onnx"),
                        key=lambda p: -p.stat().st_size)[:2]
    return found


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best (wall s, CPU s) of ``repeat`` calls after one untimed call."""
    fn()
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target", default="rtx")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from trtconv.api import check
    from trtconv.trt.realparse import import_tensorrt, parse_and_build

    trt = import_tensorrt("tensorrt_rtx")
    if trt is None:
        print("tensorrt_rtx is not installed (pip install tensorrt-rtx)", file=sys.stderr)
        return 9
    models = args.models or default_models()
    print(f"check --trt {args.target} vs {trt.__name__} {trt.__version__} OnnxParser.parse_from_file; best of "
          f"{args.repeat}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    head = ("model", "MiB", "check wall s", "check CPU s", "parse wall s", "parse CPU s", "CPU ratio")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for path in models:
        cw, cc = best(lambda p=path: check(p, trt=args.target), args.repeat)
        pw, pc = best(lambda p=path: parse_and_build(p, trt, build=False), args.repeat)
        print(f"| {path.name} | {path.stat().st_size / 2**20:.1f} | {cw:.3f} | {cc:.3f} | {pw:.3f} | {pc:.3f} | "
              f"{cc / pc:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
