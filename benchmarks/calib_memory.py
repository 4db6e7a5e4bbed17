"""Peak memory of INT8 calibration vs sample count: it must not grow with the data set.

PP-OCR's angle classifier (real weights) is calibrated on 100 and on 1000 text-line
images (rendered with a real font, tests/realdata.py) by ``trtconv quantize --precision
int8`` and, as the peer, by ONNX Runtime's ``quantize_static`` fed by a lazy
CalibrationDataReader over the same images. Each run is a fresh subprocess; its own peak
RSS comes from wait4's rusage, so runs do not see each other.

    python benchmarks/calib_memory.py [--counts 100,1000] [--methods minmax,entropy] [--no-peer]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from measure import peak_rss  # benchmarks/measure.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

ORT_PEER = r"""
import sys
from pathlib import Path
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from trtconv.samples.sources import ImagePreprocess, load_image, model_inputs
import onnx

model, folder, out, method = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
spec = model_inputs(onnx.load(model))["x"]
pp = ImagePreprocess.parse("preset=ppocr-cls")

class Reader(CalibrationDataReader):
    def __init__(self):
        self.files = iter(sorted(folder.glob("*.png")))
    def get_next(self):
        f = next(self.files, None)
        return None if f is None else {"x": load_image(f, pp, spec)}

quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8, per_channel=True,
                calibrate_method={"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy}[method],
                op_types_to_quantize=["Conv", "Gemm", "MatMul", "Add"],
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
"""


def make_images(folder: Path, n: int) -> None:
    from realdata import ocr_line_images

    folder.mkdir(parents=True, exist_ok=True)
    ocr_line_images(folder, range(n), flip_every=2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="100,1000")
    ap.add_argument("--methods", default="minmax,entropy")
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    from realmodels import rapidocr_model

    model = rapidocr_model("cls")
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="calib-mem-") as tmp:
        root = Path(tmp)
        t0 = time.monotonic()
        for n in counts:
            make_images(root / f"n{n}", n)
        print(f"rendered {sum(counts)} text-line images in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        for method in args.methods.split(","):
            for n in counts:
                out = root / f"trtconv-{method}-{n}.onnx"
                cmd = [sys.executable, "-m", "trtconv", "quantize", str(model), "--precision", "int8",
                       "--calib-data", str(root / f"n{n}"), "--preprocess", "preset=ppocr-cls",
                       "--calib-method", method, "--held-out", "0", "-o", str(out)]
                rows.append(("trtconv", method, n, *peak_rss(cmd)))
                if not args.no_peer:
                    out = root / f"ort-{method}-{n}.onnx"
                    cmd = [sys.executable, "-c", ORT_PEER, str(model), str(root / f"n{n}"), str(out), method]
                    rows.append(("onnxruntime quantize_static", method, n, *peak_rss(cmd)))
    print(f"{'tool':<28} {'method':<8} {'samples':>7} {'peak RSS MiB':>12} {'wall s':>7} {'exit':>4}")
    for tool, method, n, rss, wall, rc, err in rows:
        print(f"{tool:<28} {method:<8} {n:>7} {rss:>12.0f} {wall:>7.1f} {rc:>4}")
        if rc:
            print(f"    {err.strip().splitlines()[-1] if err.strip() else ''}")
    for tool in sorted({r[0] for r in rows}):
        for method in args.methods.split(","):
            rss = [r[3] for r in rows if r[0] == tool and r[1] == method]
            if len(rss) >= 2:
                print(f"{tool} {method}: peak RSS at {counts[-1]} samples / at {counts[0]}: {rss[-1] / rss[0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
