"""The graph proof sized by the change (issue 34): build's rewrite stage on a model where one rule
fires at the very end, this checkout against another (``--base``, e.g. the main branch before the
change), as fresh processes in turn, A B A B ... (``--runs`` pairs), medians.

The model: the 176 MB U²-Net of benchmarks/overhead.py (overhead_models.make_u2net, cached) with a
``RoiAlign`` appended that pools its mask over 8 boxes given as a second input (their image index
computed from them: all image 0). For ``--trt rtx`` the ``roialign-portable`` rule rewrites that
one node; everything before it is the original's. Each process loads the model and runs
``rewrite`` with build's settings (``rules_only``, ``step_aside``, target ``rtx``); the figures
are the rewrite's own seconds (load excluded) and the process's peak RSS (VmHWM,
benchmarks/measure.py).

    python benchmarks/proof_scope.py --base /path/to/other/checkout [--runs 2] [--cache DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from measure import peak_rss  # benchmarks/measure.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]

REWRITE = """
import json, sys, time
from trtconv.load import load_model
from trtconv.rewrites import RewriteSettings, rewrite
loaded = load_model(sys.argv[1])
start = time.perf_counter()
result = rewrite(loaded, RewriteSettings(rules_only=True, step_aside=True, target="rtx"))
seconds = time.perf_counter() - start
proof = result.report.graph_proof.to_json()
print(json.dumps({"seconds": seconds, "rules": [e.rule for e in result.report.rewrites], "passed": proof["passed"],
                  "method": proof["method"], "scope": proof.get("scope"),
                  "compared": [o["name"] for o in proof["outputs"]]}), file=sys.stderr)
"""


def with_roialign(src: Path, dst: Path) -> Path:
    """``src`` (one image input, one mask output) with a RoiAlign of the mask over 8 boxes appended."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    mask = g.output[0].name
    g.input.append(helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [8, 4]))
    g.initializer.extend([numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
                          numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    g.node.extend([helper.make_node("ReduceSum", ["boxes", "axis1"], ["box_sum"], keepdims=0, name="box_sum"),
                   helper.make_node("Mul", ["box_sum", "zero"], ["box_zero"], name="box_zero"),
                   helper.make_node("Cast", ["box_zero"], ["box_image"], to=TensorProto.INT64, name="box_image"),
                   helper.make_node("RoiAlign", [mask, "boxes", "box_image"], ["pooled"], name="pool_boxes",
                                    output_height=32, output_width=32, sampling_ratio=2)])
    g.output.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [8, 1, 32, 32]))
    onnx.save(model, str(dst))
    return dst


def model_path(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    dst = cache / "u2net_roialign.onnx"
    if not dst.exists():
        src = cache / "u2net.onnx"
        if not src.exists():
            import overhead_models

            overhead_models.make_u2net(src)
        with_roialign(src, dst)
    return dst


def one(checkout: Path, path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with contextlib.chdir(checkout):  # `-c` puts the working folder first on sys.path: that checkout's trtconv
        rss, wall, rc, err = peak_rss([sys.executable, "-c", REWRITE, str(path)], env=env, stderr_chars=20000)
    if rc != 0:
        raise SystemExit(f"{checkout}: rewrite exited {rc}: {err[-600:]}")
    doc = json.loads(err.strip().splitlines()[-1])
    if doc["rules"] != ["roialign-portable"] or not doc["passed"]:
        raise SystemExit(f"{checkout}: expected one roialign-portable rewrite, proven: {doc}")
    return {**doc, "peak": rss, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the other trtconv checkout (A)")
    ap.add_argument("--runs", type=int, default=2, help="pairs (A B A B ...)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "trtconv-overhead-models")
    args = ap.parse_args()
    path = model_path(args.cache)
    runs: dict[str, list[dict[str, object]]] = {"A": [], "B": []}
    for i in range(args.runs):
        for side, checkout in (("A", args.base), ("B", ROOT)):
            r = one(checkout, path)
            runs[side].append(r)
            print(f"pair {i + 1} {side}: rewrite {r['seconds']:.1f} s, peak {r['peak']:.0f} MiB, "
                  f"compared {r['compared']}, scope {json.dumps(r['scope'])}", flush=True)
    med = {s: (statistics.median(float(r["seconds"]) for r in rs), statistics.median(float(r["peak"]) for r in rs))
           for s, rs in runs.items()}
    ratios = [float(b["seconds"]) / float(a["seconds"]) for a, b in zip(runs["A"], runs["B"])]
    print("\n| | rewrite stage | peak memory |\n|---|---|---|")
    print(f"| A: {args.base} | {med['A'][0]:.1f} s | {med['A'][1]:.0f} MiB |")
    print(f"| B: this checkout | {med['B'][0]:.1f} s | {med['B'][1]:.0f} MiB |")
    print(f"| B / A (median of pairs) | {statistics.median(ratios):.2f}x | {med['B'][1] / med['A'][1]:.2f}x |")


if __name__ == "__main__":
    main()
