"""Peak memory on a model over 2 GB: check holds no weights, rewrite holds them once.

Generates a 2.25 GB external-data model (a chain of nine 8192x8192 float32 MatMuls;
the weight file is written in chunks, never held whole), then measures each command's
peak RSS in a fresh subprocess (wait4 rusage). The reference rows are what plain onnx
costs on the same file: ``onnx.load`` (every weight in memory once) and
``onnx.checker.check_model`` on the path.

    python benchmarks/big_model_memory.py [--keep DIR] [--no-rewrite]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from measure import peak_rss  # benchmarks/measure.py (the script's folder is on sys.path)
from onnx import TensorProto, helper

N = 8192
LAYERS = 9


def make_model(folder: Path) -> Path:
    """big.onnx + big.onnx.data (LAYERS x N x N float32), written tensor by tensor."""
    data_name = "big.onnx.data"
    inits = []
    offset = 0
    with open(folder / data_name, "wb") as fh:
        for i in range(LAYERS):
            w = np.full((N, N), 1.0 / N, np.float32)
            w[i % N, :] = 0.5  # not all equal: nothing may fold it away
            fh.write(w.tobytes())
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[N, N],
                            data_location=TensorProto.EXTERNAL)
            for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(w.nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += w.nbytes
            inits.append(t)
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"W{i}"],
                              [f"h{i}" if i < LAYERS - 1 else "y"], name=f"mm{i}") for i in range(LAYERS)]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "big.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="generate into (and keep) this folder")
    ap.add_argument("--no-rewrite", action="store_true")
    args = ap.parse_args()
    tmp = None
    if args.keep:
        folder = args.keep
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="big-model-")
        folder = Path(tmp.name)
    try:
        t0 = time.monotonic()
        model = make_model(folder)
        size = model.stat().st_size + (folder / "big.onnx.data").stat().st_size
        print(f"generated {size / 2**30:.2f} GiB in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        py = sys.executable
        runs = [
            ("trtconv check --json", [py, "-m", "trtconv", "check", str(model), "--json"]),
            ("onnx.checker.check_model(path)", [py, "-c", f"import onnx; onnx.checker.check_model({str(model)!r})"]),
            ("onnx.load (weights once)", [py, "-c", f"import onnx; onnx.load({str(model)!r})"]),
        ]
        if not args.no_rewrite:
            out = folder / "out"
            out.mkdir(exist_ok=True)
            runs.append(("trtconv rewrite --no-verify", [py, "-m", "trtconv", "rewrite", str(model), "-o",
                                                          str(out / "big.onnx"), "--no-verify", "--force"]))
        rows = [(name, *peak_rss(cmd)) for name, cmd in runs]
        print(f"model: {size / 2**20:.0f} MiB ({LAYERS} x {N}x{N} float32, external data)")
        print(f"{'run':<34} {'peak RSS MiB':>12} {'x model':>8} {'wall s':>7} {'exit':>4}")
        for name, rss, wall, rc, err in rows:
            print(f"{name:<34} {rss:>12.0f} {rss * 2**20 / size:>8.2f} {wall:>7.1f} {rc:>4}")
            if rc:
                print(f"    {err.strip().splitlines()[-1] if err.strip() else ''}")
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
