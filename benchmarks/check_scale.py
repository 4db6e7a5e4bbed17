"""``trtconv check`` on large graphs, next to ``polygraphy inspect model`` on the same files.

Generates graphs of 25k, 50k and 100k nodes (a 10-node block repeated: Conv, Relu, Add,
Mul, Sigmoid, Unsqueeze/Squeeze with initializer axes, Resize, TopK-free Clip, Identity;
weights shared so the file stays small) and adds the largest real model at hand
(PP-OCRv4 rec). Each tool runs as a fresh subprocess, best of ``--repeat`` runs: wall time
by perf_counter, CPU time (user + sys) and peak RSS from getrusage of that one child. CPU
time is the figure to compare on a shared machine (wall time suffers from other load).
Linear growth shows as a flat us/node column (in-process ``analyze()`` CPU time per node).

    python benchmarks/check_scale.py [--sizes 25000,50000,100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 10


def generate(nodes: int, path: Path) -> Path:
    """A valid opset-17 chain of ``nodes`` nodes on a [1, 8, 16, 16] tensor with a dynamic batch."""
    f = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8, 1, 1)).astype(np.float32), "W"),
        numpy_helper.from_array(np.full((1, 8, 1, 1), 0.1, np.float32), "B"),
        numpy_helper.from_array(np.full((1, 8, 1, 1), 0.9, np.float32), "S"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([1, 1, 1, 1], np.float32), "ones4"),
    ]
    body = []
    cur = "x"
    for b in range(nodes // BLOCK):
        t = [f"b{b}_{i}" for i in range(BLOCK)]
        body += [
            helper.make_node("Conv", [cur, "W"], [t[0]], name=f"conv{b}"),
            helper.make_node("Relu", [t[0]], [t[1]], name=f"relu{b}"),
            helper.make_node("Add", [t[1], "B"], [t[2]], name=f"add{b}"),
            helper.make_node("Mul", [t[2], "S"], [t[3]], name=f"mul{b}"),
            helper.make_node("Sigmoid", [t[3]], [t[4]], name=f"sig{b}"),
            helper.make_node("Unsqueeze", [t[4], "axes0"], [t[5]], name=f"unsq{b}"),
            helper.make_node("Squeeze", [t[5], "axes0"], [t[6]], name=f"sq{b}"),
            helper.make_node("Resize", [t[6], "", "ones4"], [t[7]], mode="nearest", name=f"resize{b}"),
            helper.make_node("Clip", [t[7]], [t[8]], name=f"clip{b}"),
            helper.make_node("Identity", [t[8]], [t[9]], name=f"id{b}"),
        ]
        cur = t[9]
    g = helper.make_graph(body, "scale", [helper.make_tensor_value_info("x", f, ["N", 8, 16, 16])],
                          [helper.make_tensor_value_info(cur, f, ["N", 8, 16, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(m, str(path))
    return path


def measure(cmd: list[str], repeat: int) -> tuple[float, float, float, int]:
    """Best (wall s, CPU s, peak RSS MiB) over ``repeat`` runs of ``cmd``, and its exit code."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, r.returncode)\n"
    )
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True)
        wall, cpu, rss_kib, rc = out.stdout.split()
        runs.append((float(wall), float(cpu), int(rss_kib) / 1024, int(rc)))
    return min(r[0] for r in runs), min(r[1] for r in runs), min(r[2] for r in runs), runs[0][3]


def in_process(path: Path, repeat: int) -> float:
    """Best CPU seconds of load + analyze in this process (no interpreter start-up)."""
    from trtconv.analyze import analyze
    from trtconv.load import load_model

    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        analyze(load_model(path, structure_only=True), "11.4")
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25000,50000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trtconv = shutil.which("trtconv") or sys.exit("trtconv is not installed (make install)")
    polygraphy = shutil.which("polygraphy") or sys.exit("polygraphy is not installed")
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from realmodels import rapidocr_model

    rows = []
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        models: list[tuple[str, Path]] = []
        for n in (int(s) for s in args.sizes.split(",")):
            models.append((f"generated {n // 1000}k", generate(n, Path(tmp) / f"g{n}.onnx")))
        models.append(("PP-OCRv4 rec (real)", rapidocr_model("rec")))
        for label, path in models:
            nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
            check = measure([trtconv, "check", "--json", str(path)], args.repeat)
            api = in_process(path, args.repeat)
            poly = measure([polygraphy, "inspect", "model", str(path)], args.repeat)
            rows.append((label, nodes, path.stat().st_size / 2**20, check, api, poly))
    head = ("model", "nodes", "MiB", "check wall s", "check CPU s", "check RSS MiB", "rc",
            "analyze() CPU s", "us/node", "polygraphy wall s", "polygraphy CPU s", "polygraphy RSS MiB", "rc")
    print(f"load average before/after: {load_before} / {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs, best of {args.repeat}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, nodes, mib, (cw, cc, cm, crc), api, (pw, pc, pm, prc) in rows:
        print(f"| {label} | {nodes} | {mib:.1f} | {cw:.2f} | {cc:.2f} | {cm:.0f} | {crc} | {api:.2f} | "
              f"{1e6 * api / nodes:.1f} | {pw:.2f} | {pc:.2f} | {pm:.0f} | {prc} |")


if __name__ == "__main__":
    main()
