"""trtconv's default INT8 against its peers, per real model, measured side by side in one run.

Rows per model (PP-OCR cls/rec/det; Silero VAD: ``silero``, the packaged model with its network in
``If`` branches, fed 16 and 8 kHz chunks, and ``silero16k``, ``silero_vad_16k_op15.onnx``: the 16 kHz
network in the main graph, fed a real recorded sentence, see ``silero16k_data``):

- ``trtconv default``: ``quantize_int8`` with its defaults (entropy, FP16 remainder), what
  ``trtconv quantize --precision int8`` writes;
- ``ort MinMax | Percentile | Entropy``: ONNX Runtime ``quantize_static`` set up as in
  ``benchmarks/quantize_vs_ort.py`` (QDQ, symmetric, per-channel, Entropy with 2048 bins);
- ``modelopt``: NVIDIA ModelOpt's ONNX PTQ, ``modelopt.onnx.quantization.quantize(...,
  quantize_mode="int8", calibration_eps=["cpu"])`` with its defaults (entropy, FP16
  remainder); where that fails, once more with ``high_precision_dtype="fp32"`` (``fp32-rest``).
  ModelOpt pins onnx and onnxruntime-gpu versions other than trtconv's, so it runs in its own
  interpreter: ``--modelopt-python`` (a venv with ``nvidia-modelopt[onnx]``).

Every tool calibrates on the same ``.npz`` samples (``quantize_vs_ort.make_data``, ``silero16k_data``) in a fresh
process; ``calib s`` is the quantize call, ``process s`` the whole subprocess (imports
included). Every written model then runs in ONNX Runtime *as written* (graph optimizations
off: ORT 1.32 miscomputes fused float16 Q/DQ) on the held-out samples, against FP32:
``min cosine`` over outputs, and a task metric per model — cls: top-1 agreement; rec:
CTC-greedy-decoded string equality; det: IoU of the text mask (probability > 0.3, DB's
threshold); Silero: agreement of the speech decision (probability > 0.5).

    python benchmarks/int8_vs_peers.py [--models cls,rec,det,silero,silero16k] [--modelopt-python PATH]
                                       [--silero16k-speech recorded|synthetic] [--silero16k-held 100-103]
                                       [--skip-ort-entropy]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import quantize_vs_ort as base  # noqa: E402  (same data, same ORT setup, same RSS probe)

TOOLS = [("trtconv", "default"), ("ort", "MinMax"), ("ort", "Percentile"), ("ort", "Entropy"), ("modelopt", "default")]


# ----------------------------------------------------------------------------- children


def child(tool: str, method: str, spec: dict, out: str) -> None:
    t0 = time.perf_counter()
    error = None
    try:
        if tool == "modelopt":
            run_modelopt(spec, out, method)
        else:
            import onnx

            from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

            model = onnx.load(spec["model"])
            calib = SampleSet(SampleSource.detect(spec["calib"]), model_inputs(model))
            t0 = time.perf_counter()
            if tool == "trtconv":
                from trtconv.precision.int8 import Int8Settings, quantize_int8

                onnx.save(quantize_int8(model, Int8Settings(), calib, model_path=Path(spec["model"])).model, out)
            else:
                base.run_ort(spec["model"], calib, method, out)
    except Exception as exc:  # a peer that fails is a result, not a benchmark failure
        error = f"{type(exc).__name__}: {_first_line(exc)}"
    print(json.dumps({"seconds": time.perf_counter() - t0, "rss_mib": base.peak_rss_mib(), "error": error}))


def run_modelopt(spec: dict, out: str, method: str) -> None:
    """ModelOpt's ONNX PTQ on the CPU, fed the same samples one by one through its ``calibration_data_reader``
    (stacked arrays, its other input, are split along axis 0: Silero's state [2, batch, 128] and scalar
    sample rate cannot be fed that way). ``fp32-rest``: its ``high_precision_dtype="fp32"``, run only where
    its default fails (its FP16 conversion crashes on Silero 16k's nested ``If`` subgraphs)."""
    from modelopt.onnx.quantization import quantize
    from onnxruntime.quantization import CalibrationDataReader

    samples = [dict(np.load(f)) for f in sorted(Path(spec["calib"]).glob("*.npz"))]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

        def get_first(self):
            return samples[0]

        def rewind(self) -> None:
            self.it = iter(samples)

    quantize(spec["model"], quantize_mode="int8", calibration_data_reader=Reader(), calibration_eps=["cpu"],
             output_path=out, log_level="ERROR", high_precision_dtype="fp32" if method == "fp32-rest" else "fp16")


def silero16k_data(root: Path, speech: str = "recorded", held: range = range(100, 104)) -> dict:
    """``silero_vad_16k_op15.onnx`` fed a real recorded sentence (tests/realdata.py ``recorded_speech``) at
    seed-chosen levels and noise: 4 calibration and 4 held-out versions, differing in level and noise (seeds 0-3
    and 100-103); every 8th chunk calibrates (64), every 2nd is held out (252: more than the other rows, the
    speech decision is one bit per chunk). ``speech="synthetic"``: 4 s of ``speech_like`` per seed instead;
    ``held``: other held-out seeds (a second, disjoint check of the same calibration)."""
    from realdata import recorded_speech, silero_samples, speech_like
    from realmodels import silero_model

    model = silero_model("silero_vad_16k_op15.onnx")
    audio = recorded_speech if speech == "recorded" else speech_like
    parts = {"calib": silero_samples(model, range(4), seconds=4.0, every=8, speech=audio),
             "held": silero_samples(model, held, seconds=4.0, every=2, speech=audio)}
    for part, samples in parts.items():
        (root / "silero16k" / part).mkdir(parents=True)
        for i, s in enumerate(samples):
            np.savez(root / "silero16k" / part / f"{i:03d}.npz", **s)
    return {"model": str(model), "calib": str(root / "silero16k" / "calib"), "held": str(root / "silero16k" / "held")}


# ----------------------------------------------------------------------------- task metrics


def ctc_decode(probs: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC per batch row: argmax per step, repeats merged, blank (0) dropped."""
    out = []
    for row in np.argmax(probs, axis=-1):
        seq, prev = [], -1
        for c in row:
            if c != prev and c != 0:
                seq.append(int(c))
            prev = c
        out.append(tuple(seq))
    return out


def task_metric(name: str, refs: list[dict], gots: list[dict]) -> tuple[str, float]:
    if name == "cls":
        hits = [np.argmax(r[k], -1) == np.argmax(g[k], -1) for r, g in zip(refs, gots) for k in r]
        return "top-1 agreement", float(np.mean(np.concatenate([h.ravel() for h in hits])))
    if name == "rec":
        same = [a == b for r, g in zip(refs, gots) for k in r for a, b in zip(ctc_decode(r[k]), ctc_decode(g[k]))]
        return "decoded text equal", float(np.mean(same))
    if name == "det":
        inter = union = 0
        for r, g in zip(refs, gots):
            for k in r:
                a, b = r[k] > 0.3, g[k] > 0.3
                inter += int(np.count_nonzero(a & b))
                union += int(np.count_nonzero(a | b))
        return "text-mask IoU", inter / union if union else 1.0
    key = "output"
    agree = [(r[key] > 0.5) == (g[key] > 0.5) for r, g in zip(refs, gots)]
    return "speech decision agreement", float(np.mean(np.concatenate([a.ravel() for a in agree])))


def evaluate(name: str, fp32_path: str, candidate: str, held) -> dict:
    import onnx

    from trtconv.precision.int8_accuracy import accuracy_report
    from trtconv.reference import ort

    fp32 = onnx.load(fp32_path)
    q = onnx.load(candidate)
    stats, n = accuracy_report(fp32, q, held, optimize=False)
    ref_sess, cand_sess = ort.session(fp32, optimize=True), ort.session(q, optimize=False)
    outputs = [o.name for o in fp32.graph.output]
    refs, gots = [], []
    for s in held:
        refs.append({k: v for k, v in ort.run(ref_sess, s).items() if v.dtype.kind == "f"})
        got = ort.run(cand_sess, s, outputs)
        gots.append({k: np.asarray(got[k], dtype=np.float32) for k in refs[-1]})
    metric, value = task_metric(name, refs, gots)
    return {"cosine": min(s.cosine for s in stats), "metric": metric, "value": value, "held": n,
            "qdq": base.qdq_count(q), "fp16": any(t.data_type == onnx.TensorProto.FLOAT16 for t in q.graph.initializer)}


# ----------------------------------------------------------------------------- parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cls,rec,det,silero,silero16k")
    ap.add_argument("--modelopt-python", default=sys.executable,
                    help="interpreter with nvidia-modelopt[onnx] installed (its own venv: it pins onnx versions)")
    ap.add_argument("--silero16k-speech", choices=("recorded", "synthetic"), default="recorded",
                    help="silero16k's audio: the recorded sentence (default) or tests/realdata.py's synthesised speech")
    ap.add_argument("--silero16k-held", default="100-103", metavar="FIRST-LAST",
                    help="silero16k's held-out seeds (calibration is always seeds 0-3)")
    ap.add_argument("--skip-ort-entropy", action="store_true", help="ORT's 2048-bin entropy takes minutes per model")
    ap.add_argument("--child", nargs=4, metavar=("TOOL", "METHOD", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], json.loads(args.child[2]), args.child[3])
        return
    import onnx

    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = args.models.split(",")
        specs = base.make_data(root, quick=True) if set(names) - {"silero16k"} else {}
        if "silero16k" in names:
            first, last = (int(x) for x in args.silero16k_held.split("-"))
            specs["silero16k"] = silero16k_data(root, args.silero16k_speech, range(first, last + 1))
        for name in names:
            # peers may write beside or over the model they are given (one rewrote the installed
            # PP-OCR file with inferred shapes): each gets a private copy, never the package's file
            private = root / f"{name}-input.onnx"
            shutil.copyfile(specs[name]["model"], private)
            spec = {**specs[name], "model": str(private)}
            held = SampleSet(SampleSource.detect(spec["held"]), model_inputs(onnx.load(spec["model"])))
            todo = list(TOOLS)
            while todo:
                tool, method = todo.pop(0)
                if args.skip_ort_entropy and (tool, method) == ("ort", "Entropy"):
                    continue
                out = str(root / f"{name}-{tool}-{method}.onnx")
                python = args.modelopt_python if tool == "modelopt" else sys.executable
                t0 = time.perf_counter()
                proc = subprocess.run([python, __file__, "--child", tool, method, json.dumps(spec), out],
                                      capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
                wall = time.perf_counter() - t0
                last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
                info = json.loads(last) if last.startswith("{") else {"error": proc.stderr.strip()[-200:]}
                row = {"model": name, "tool": tool, "method": method, "process_s": wall, **info}
                if not info.get("error") and Path(out).exists():
                    try:
                        row.update(evaluate(name, spec["model"], out, held))
                    except Exception as exc:
                        row["error"] = f"evaluation: {type(exc).__name__}: {_first_line(exc)}"
                elif not info.get("error"):
                    row["error"] = "no model written"
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if (tool, method) == ("modelopt", "default") and row.get("error"):
                    todo.append(("modelopt", "fp32-rest"))
    print(table(rows))


def _first_line(exc: BaseException) -> str:
    """The error's first line, whole (a cut one loses names and numbers)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def table(rows: list[dict]) -> str:
    lines = ["| model | tool | method | task metric | value | min cosine | Q nodes | FP16 rest | calib s | process s "
             "| peak RSS MiB | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fp16 = "-" if "fp16" not in r else ("yes" if r["fp16"] else "no")
        lines.append(f"| {r['model']} | {r['tool']} | {r['method']} | {r.get('metric', '-')} | "
                     f"{base._fmt(r, 'value', '.4f')} | {base._fmt(r, 'cosine', '.5f')} | {base._fmt(r, 'qdq', 'd')} | "
                     f"{fp16} | {base._fmt(r, 'seconds', '.1f')} | {base._fmt(r, 'process_s', '.1f')} | "
                     f"{base._fmt(r, 'rss_mib', '.0f')} | {(r.get('error') or '').replace('|', '/')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
