"""INT8 calibration: trtconv vs ONNX Runtime's quantize_static, measured in the same run.

For each real model (PP-OCR det/rec/cls, Silero VAD) and each method, one fresh
subprocess loads the model, calibrates on the same .npz samples (read lazily, one at a
time, by both tools) and writes the Q/DQ model; it reports its wall time and its own
peak RSS (VmHWM). The parent then measures every model against FP32 on held-out
samples with the same code (trtconv.precision.int8.accuracy_report).

ONNX Runtime settings: QDQ format, symmetric INT8 activations and weights, per-channel
weights, restricted to the op types trtconv quantizes; MinMax, Percentile (99.99) and
Entropy with 2048 bins (quantize_static cannot pass a bin count, so its calibrator
factory is wrapped to ask for 2048; its default is 128, which leaves the KL search a
single candidate). Samples have one shape per model: ORT's histogram calibrators stack
all samples of a tensor and fail on samples of different shapes.

Two timings per row, so that each figure says what it measures:

- ``core s``: the quantize call alone, inside the child, after imports and model load:
  trtconv's ``quantize_int8`` (calibration + Q/DQ insertion, in memory); ORT's
  ``quantize_static`` (its whole call: it reads the model from a path, calibrates and
  writes the output).
- ``end-to-end s``: one fresh process from start to exit, measured by the parent:
  trtconv's CLI, ``trtconv quantize MODEL --precision int8 --calib-data DIR
  --calib-method M --held-out 0 --int8-unverified --no-calib-cache -o OUT`` (interpreter start, imports,
  load and validation, calibration, insertion, save); for ORT the child process around
  ``quantize_static`` (interpreter start, imports, opset upgrade, the call). The speed-up
  reported is ORT's ``quantize_static`` call over trtconv's end-to-end process: trtconv
  is charged everything, ORT only its call.

This measures calibration, not the gate: nothing is held out to judge on, so trtconv runs with
``unverified=True`` (CLI: ``--int8-unverified``); without it, fewer than the claim's judged samples are refused
(exit 11) before any work.

    python benchmarks/quantize_vs_ort.py [--models cls,rec,det,silero] [--methods entropy] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# ORT quantizes the op types trtconv places Q/DQ for (its default list adds Mul, Sigmoid, ... which
# costs it accuracy and, with 2048-bin entropy, minutes per extra tensor).
OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add")
METHODS = {"trtconv": ("entropy", "percentile", "minmax"), "ort": ("Entropy", "Percentile", "MinMax")}


# ----------------------------------------------------------------------------- data


def make_data(root: Path, quick: bool) -> dict[str, dict]:
    """npz samples per model: calib/ and held/ folders. Fixed shapes, so ORT's entropy can run."""
    import onnx
    from realdata import document_image, silero_samples, text_line_image
    from realmodels import rapidocr_model, silero_model

    from trtconv.samples.sources import ImagePreprocess, load_image, model_inputs

    n_cal, n_held = (16, 6) if quick else (32, 8)
    specs = {}

    def save(name: str, samples: list[dict], model_path: Path, held: int = n_held) -> None:
        for part, chunk in (("calib", samples[:-held]), ("held", samples[-held:])):
            d = root / name / part
            d.mkdir(parents=True, exist_ok=True)
            for i, s in enumerate(chunk):
                np.savez(d / f"{i:03d}.npz", **s)
        specs[name] = {"model": str(model_path), "calib": str(root / name / "calib"),
                       "held": str(root / name / "held")}

    def ocr(kind: str, preset: str, images, held: int = n_held) -> None:
        path = rapidocr_model(kind)
        spec = model_inputs(onnx.load(str(path)))["x"]
        pp = ImagePreprocess.preset(preset)
        samples = []
        for i, img in enumerate(images):
            f = root / f"{kind}_{i}.png"
            img.save(f)
            samples.append({"x": load_image(f, pp, spec)})
        save(kind, samples, path, held)

    total = n_cal + n_held
    ocr("cls", "ppocr-cls", [text_line_image(s).rotate(180 if s % 2 else 0) for s in range(total)])
    from dataclasses import replace

    rec_pp = replace(ImagePreprocess.preset("ppocr-rec"), size=(48, 320))
    path = rapidocr_model("rec")
    spec = model_inputs(onnx.load(str(path)))["x"]
    recs = []
    for s in range(total):
        f = root / f"rec_{s}.png"
        text_line_image(1000 + s).save(f)
        recs.append({"x": load_image(f, rec_pp, spec)})
    save("rec", recs, path)
    n_det = 9 if quick else 12  # fewer, larger samples
    ocr("det", "ppocr-det", [document_image(2000 + s, (320, 320)) for s in range(n_det)], held=n_det // 3)
    sil = silero_samples(silero_model(), range(2), seconds=2.0, every=2)
    sil += silero_samples(silero_model(), range(2, 3), seconds=2.0, every=2, sr=8000)
    order = np.random.default_rng(0).permutation(len(sil))[:total]
    save("silero", [sil[i] for i in order], silero_model())
    return specs


# ----------------------------------------------------------------------------- child


def child(tool: str, method: str, spec: dict, out: str) -> None:
    import onnx

    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    model = onnx.load(spec["model"])
    calib = SampleSet(SampleSource.detect(spec["calib"]), model_inputs(model))
    t0 = time.perf_counter()
    error = None
    try:
        if tool == "trtconv":
            from trtconv.precision.int8 import Int8Settings, quantize_int8

            res = quantize_int8(model, Int8Settings(method=method, unverified=True), calib, model_path=Path(spec["model"]))
            seconds = time.perf_counter() - t0
            onnx.save(res.model, out)
        else:
            seconds = run_ort(spec["model"], calib, method, out)
    except Exception as exc:  # a peer that crashes is a result, not a benchmark failure
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rss_mib": peak_rss_mib(), "error": error}))


def peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM, not getrusage: Linux carries ru_maxrss across fork+exec,
    so a child would report the benchmark parent's size whenever that is larger."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ort(model_path: str, calib, method: str, out: str, exclude: tuple[str, ...] = ()) -> float:
    """Run ORT's quantize_static; returns the seconds of that call alone. ``exclude``: node names kept float
    (its ``nodes_to_exclude``)."""
    import importlib

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType

    ortq = importlib.import_module("onnxruntime.quantization.quantize")  # the module, not the function

    from trtconv.precision.int8 import upgrade_opset

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    original = ortq.create_calibrator

    def with_2048_bins(*args, **kwargs):
        opts = dict(kwargs.get("extra_options") or {})
        opts.setdefault("num_bins", 2048)
        kwargs["extra_options"] = opts
        return original(*args, **kwargs)

    ortq.create_calibrator = with_2048_bins
    work, _ = upgrade_opset(onnx.load(model_path))  # ORT needs opset >= 13 for per-channel too
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.onnx"
        onnx.save(work, src)
        t0 = time.perf_counter()
        ortq.quantize_static(
            str(src), out, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8, per_channel=True, calibrate_method=getattr(CalibrationMethod, method),
            op_types_to_quantize=list(OP_TYPES), nodes_to_exclude=list(exclude),
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "CalibTensorRangeSymmetric": True,
                           "CalibPercentile": 99.99},
        )
        return time.perf_counter() - t0


# ----------------------------------------------------------------------------- parent


def qdq_count(model) -> int:
    from trtconv.onnxutil.walk import iter_graphs

    return sum(1 for g in iter_graphs(model.graph) for n in g.node if n.op_type == "QuantizeLinear")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cls,rec,det,silero")
    ap.add_argument("--methods", default="", help="comma-separated subset, e.g. entropy (case-insensitive)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", nargs=4, metavar=("TOOL", "METHOD", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tool, method, spec, out = args.child
        child(tool, method, json.loads(spec), out)
        return
    import onnx

    from trtconv.precision.int8 import accuracy_report
    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        specs = make_data(root, args.quick)
        for name in args.models.split(","):
            spec = specs[name]
            fp32 = onnx.load(spec["model"])
            held = SampleSet(SampleSource.detect(spec["held"]), model_inputs(fp32))
            wanted = {m.lower() for m in args.methods.split(",") if m}
            for tool in ("trtconv", "ort"):
                for method in METHODS[tool]:
                    if wanted and method.lower() not in wanted:
                        continue
                    out = str(root / f"{name}-{tool}-{method}.onnx")
                    env = {**os.environ, "OMP_NUM_THREADS": "2"}
                    t0 = time.perf_counter()
                    proc = subprocess.run(
                        [sys.executable, __file__, "--child", tool, method, json.dumps(spec), out],
                        capture_output=True, text=True, env=env,
                    )
                    child_wall = time.perf_counter() - t0
                    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
                    info = json.loads(last) if last.startswith("{") else {"error": proc.stderr[-200:]}
                    row = {"model": name, "tool": tool, "method": method, **info}
                    if tool == "ort":
                        row["end_to_end"] = child_wall
                    else:  # the whole CLI call, a fresh process, same samples, its own output file
                        cli_out = str(root / f"{name}-trtconv-cli-{method}.onnx")
                        t0 = time.perf_counter()
                        cli = subprocess.run(
                            [sys.executable, "-m", "trtconv", "quantize", spec["model"], "--precision", "int8",
                             "--calib-data", spec["calib"], "--calib-method", method, "--held-out", "0",
                             "--int8-unverified", "--no-calib-cache", "-o", cli_out, "--force"],
                            capture_output=True, text=True, env=env,
                        )
                        row["end_to_end"] = time.perf_counter() - t0
                        if cli.returncode:
                            row["error"] = f"CLI exit {cli.returncode}: {cli.stderr.strip()[-120:]}"
                    if not info.get("error") and Path(out).exists():
                        q = onnx.load(out)
                        row["qdq"] = qdq_count(q)
                        stats, n = accuracy_report(fp32, q, held)
                        row["cosine"] = min(s.cosine for s in stats)
                        row["max_abs"] = max(s.max_abs for s in stats)
                        tops = [s.top1_agreement for s in stats if s.top1_agreement is not None]
                        row["top1"] = min(tops) if tops else None
                        row["held"] = n
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(rows))
    print(speedups(rows))


def table(rows: list[dict]) -> str:
    head = ("| model | tool | method | Q nodes | min cosine | max abs | top-1 | core s | end-to-end s "
            "| peak RSS MiB | note |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['model']} | {r['tool']} | {r['method']} | {_fmt(r, 'qdq', 'd')} | "
                     f"{_fmt(r, 'cosine', '.5f')} | {_fmt(r, 'max_abs', '.3g')} | {_fmt(r, 'top1', '.3f')} | "
                     f"{_fmt(r, 'seconds', '.1f')} | {_fmt(r, 'end_to_end', '.1f')} | {_fmt(r, 'rss_mib', '.0f')} "
                     f"| {(r.get('error') or '')[:80]} |")
    return "\n".join(lines)


def speedups(rows: list[dict]) -> str:
    """Per model and method: ORT's quantize_static call / trtconv's whole CLI process (end to end),
    and, for reference, core / core."""
    lines = ["\n| model | method | ORT quantize_static s | trtconv CLI end-to-end s | speed-up (end to end) "
             "| core / core |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["tool"] != "trtconv" or r.get("error"):
            continue
        peer = next((p for p in rows if p["tool"] == "ort" and p["model"] == r["model"]
                     and p["method"].lower() == r["method"] and not p.get("error")), None)
        if peer is None:
            continue
        lines.append(f"| {r['model']} | {r['method']} | {peer['seconds']:.1f} | {r['end_to_end']:.1f} "
                     f"| {peer['seconds'] / r['end_to_end']:.1f}× | {peer['seconds'] / r['seconds']:.0f}× |")
    return "\n".join(lines)


def _fmt(row: dict, key: str, spec: str) -> str:
    v = row.get(key)
    return "-" if v is None else format(v, spec)


if __name__ == "__main__":
    main()
