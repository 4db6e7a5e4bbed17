"""trtconv's INT8 against its peers, per real model, at full INT8 and at the INT8 share where each passes the gate.

Models (``--models``): PP-OCR ``cls``/``rec``/``det``; ``yolo`` (NudeNet's YOLOv8n, 320x320, on rendered
scenes: tests/realdata.py ``scene_image``); ``dddd`` (ddddocr's float CRNN recognizer ``common.onnx``,
1x64x256 gray, on rendered text lines); ``silero16k`` (``silero_vad_16k_op15.onnx`` on a real recorded
sentence, see ``silero16k_data``); ``silero`` (the packaged model, network in ``If`` branches, 16 and 8 kHz);
``bert``/``vit``: the coverage benchmark's generated transformers (benchmarks/build_coverage.py, seeded random
weights) with the samples of benchmarks/int8_methods.py ``extra_data`` (token ids; rendered pages).

Per model, each tool and method first quantizes every Conv/MatMul/Gemm it can (**full INT8**):

- ``trtconv entropy | auto``: ``quantize_int8`` (FP16 remainder) with ``method`` entropy (the default) or
  auto (chosen on the held-out samples);
- ``ort MinMax | Percentile | Entropy``: ONNX Runtime ``quantize_static`` set up as in
  ``benchmarks/quantize_vs_ort.py`` (QDQ, symmetric, per-channel, Percentile 99.99, Entropy with 2048 bins);
- ``modelopt entropy | max``: NVIDIA ModelOpt's ONNX PTQ, ``modelopt.onnx.quantization.quantize(...,
  quantize_mode="int8", calibration_method=..., calibration_eps=["cpu"])``, FP16 remainder; where that fails,
  once more with ``high_precision_dtype="fp32"`` (method suffixed ``/fp32-rest``). ModelOpt pins onnx and
  onnxruntime-gpu versions other than trtconv's: ``--modelopt-python`` (its own venv).

Then, where full INT8 misses the default gate (cosine >= 0.99 per output on the held-out samples, as
``trtconv.reference.compare.DEFAULT_THRESHOLDS["int8"]``), the **share at which it first passes**: trtconv
with ``auto_exclude=True, min_share=0`` (its own search); each peer by keeping layers out of INT8 in one
shared order — trtconv's per-layer sensitivity (entropy scales, worst first) — at shares ``--steps`` (ORT:
``nodes_to_exclude``; ModelOpt: ``nodes_to_exclude``), the first share that passes is reported (ORT's
Entropy only with ``--entropy-steps``: minutes per calibration).

Every written model runs in ONNX Runtime *as written* (graph optimizations off: ORT 1.32 miscomputes fused
float16 Q/DQ) on the held-out samples against FP32: ``min cosine`` over outputs (pooled over samples, the
gate's measure), a task metric (cls: top-1 agreement; rec/dddd: CTC-greedy-decoded string equality; det:
IoU of the text mask, probability > 0.3; yolo: IoU of the confident-anchor sets, class score > 0.25;
Silero: speech-decision agreement, probability > 0.5; bert/vit: the worst token's cosine, each token's hidden vector
to FP32's, over the held-out samples), and the **INT8 share**: Conv/ConvTranspose/MatMul/
Gemm nodes (subgraphs included) whose data input arrives through a DequantizeLinear, over those of the FP32
model. ``calib s``: the quantize call in a fresh process.

This measures methods against peers on the same few held-out samples, not the gate's claim: trtconv runs with
``unverified=True`` (otherwise fewer judged samples than the claim needs are refused, exit 11); every tool is
judged by the same measure below; ``own_gate`` says only that every held-out sample met trtconv's limits.

    python benchmarks/int8_vs_peers.py [--models cls,rec,det,yolo,dddd,silero16k,bert,vit] [--modelopt-python PATH]
                                       [--steps 0.75,0.5] [--entropy-steps] [--skip-ort-entropy] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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

TOOLS = [("trtconv", "entropy"), ("trtconv", "auto"), ("ort", "MinMax"), ("ort", "Percentile"), ("ort", "Entropy"),
         ("modelopt", "entropy"), ("modelopt", "max")]


# ----------------------------------------------------------------------------- children


def child(tool: str, method: str, spec: dict, out: str) -> None:
    """One quantization in a fresh process; prints one JSON line (seconds, peak RSS, error, tool details).
    ``spec["exclude"]``: node names kept out of INT8; ``spec["auto_exclude"]``: trtconv's own search."""
    t0 = time.perf_counter()
    error, info = None, {}
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
                info = run_trtconv(model, spec, method, calib, out)
            else:
                base.run_ort(spec["model"], calib, method, out, tuple(spec.get("exclude", ())))
    except Exception as exc:  # a peer that fails is a result, not a benchmark failure
        error = f"{type(exc).__name__}: {_first_line(exc)}"
    print(json.dumps({"seconds": time.perf_counter() - t0, "rss_mib": base.peak_rss_mib(), "error": error, **info}))


def run_trtconv(model, spec: dict, method: str, calib, out: str) -> dict:
    """``quantize_int8`` as ``trtconv quantize --precision int8`` runs it, gate on the held-out samples; a
    failing gate still yields its model (full INT8) and the per-layer sensitivity (the shared order)."""
    import onnx

    from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, quantize_int8
    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    held = SampleSet(SampleSource.detect(spec["held"]), model_inputs(model))
    search = bool(spec.get("auto_exclude"))
    settings = Int8Settings(method=method, auto_exclude=search, min_share=0.0, sensitivity=not search,
                            unverified=True)  # few held-out samples: a method comparison, not the claim
    try:
        result = quantize_int8(model, settings, calib, model_path=Path(spec["model"]), eval_samples=held)
    except Int8AccuracyError as exc:
        result = exc.result
    onnx.save(result.model, out)
    r = result.report
    return {"chosen": r.chosen_method or method, "own_gate": not r.violations, "auto_excluded": len(r.auto_excluded),
            "gate_evaluations": r.gate_evaluations, "calibration_seconds": r.calibration_seconds,
            "ranking": [e.node for e in r.sensitivity if e.graph == "main"]}


def run_modelopt(spec: dict, out: str, method: str) -> None:
    """ModelOpt's ONNX PTQ on the CPU, fed the same samples one by one through its ``calibration_data_reader``.
    ``method``: its ``calibration_method`` (entropy, max), ``/fp32-rest`` for ``high_precision_dtype="fp32"``
    (run only where its FP16 remainder fails: on Silero 16k's nested ``If`` subgraphs)."""
    from modelopt.onnx.quantization import quantize
    from modelopt_reader import data_reader  # benchmarks/ (this script's folder)

    samples = [dict(np.load(f)) for f in sorted(Path(spec["calib"]).glob("*.npz"))]

    calib_method, _, rest = method.partition("/")
    exclude = [f"^{re.escape(n)}$" for n in spec.get("exclude", ())] or None
    quantize(spec["model"], quantize_mode="int8", calibration_method=calib_method, calibration_data_reader=data_reader(samples),
             calibration_eps=["cpu"], output_path=out, log_level="ERROR", nodes_to_exclude=exclude,
             high_precision_dtype="fp32" if rest == "fp32-rest" else "fp16")


# ----------------------------------------------------------------------------- data


def image_data(root: Path, name: str, quick: bool) -> dict:
    """``yolo``: NudeNet's YOLOv8n on rendered outdoor scenes, letterboxed to 320x320 (its export size);
    ``dddd``: ddddocr's float recognizer on rendered text lines, gray, height 64 (its preprocessing: /255, no
    mean), each line scaled and cut or padded to width 256 (fixed shapes, so ORT's entropy can run)."""
    from dataclasses import replace

    import onnx
    from PIL import Image
    from realdata import scene_image, text_line_image
    from realmodels import ddddocr_model, nudenet_model

    from trtconv.samples.sources import ImagePreprocess, load_image, model_inputs

    n_cal, n_held = (16, 8) if quick else (32, 8)
    samples = []
    if name == "yolo":
        path = nudenet_model()
        spec = model_inputs(onnx.load(str(path)))["images"]
        pp = replace(ImagePreprocess.preset("yolo"), size=(320, 320))
        for s in range(n_cal + n_held):
            f = root / f"yolo_{s}.png"
            scene_image(3000 + s).save(f)
            samples.append({"images": load_image(f, pp, spec)})
    else:
        path = ddddocr_model("common.onnx")
        for s in range(n_cal + n_held):
            img = text_line_image(4000 + s, height=64).convert("L")
            img = img.resize((max(1, round(img.width * 64 / img.height)), 64), Image.BILINEAR)
            canvas = Image.new("L", (256, 64), int(np.asarray(img)[0, 0]))
            canvas.paste(img.crop((0, 0, min(256, img.width), 64)), (0, 0))
            samples.append({"input1": (np.asarray(canvas, np.float32) / 255.0)[None, None]})
    for part, chunk in (("calib", samples[:-n_held]), ("held", samples[-n_held:])):
        (root / name / part).mkdir(parents=True)
        for i, x in enumerate(chunk):
            np.savez(root / name / part / f"{i:03d}.npz", **x)
    return {"model": str(path), "calib": str(root / name / "calib"), "held": str(root / name / "held")}


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


def ctc_decode(probs: np.ndarray) -> tuple[int, ...]:
    """Greedy CTC over one batch-1 output (time steps x classes, any layout with the classes last): argmax
    per step, repeats merged, blank (0) dropped."""
    seq, prev = [], -1
    for c in np.argmax(probs.reshape(-1, probs.shape[-1]), axis=-1):
        if c != prev and c != 0:
            seq.append(int(c))
        prev = c
    return tuple(seq)


def task_metric(name: str, refs: list[dict], gots: list[dict]) -> tuple[str, float]:
    if name == "cls":
        hits = [np.argmax(r[k], -1) == np.argmax(g[k], -1) for r, g in zip(refs, gots) for k in r]
        return "top-1 agreement", float(np.mean(np.concatenate([h.ravel() for h in hits])))
    if name in ("rec", "dddd"):
        return "decoded text equal", float(np.mean([ctc_decode(r[k]) == ctc_decode(g[k])
                                                    for r, g in zip(refs, gots) for k in r]))
    if name in ("det", "yolo"):
        inter = union = 0
        for r, g in zip(refs, gots):
            for k in r:  # det: text mask (probability > 0.3); yolo: anchors whose best class score > 0.25
                a, b = (r[k] > 0.3, g[k] > 0.3) if name == "det" else (r[k][:, 4:].max(1) > 0.25,
                                                                          g[k][:, 4:].max(1) > 0.25)
                inter += int(np.count_nonzero(a & b))
                union += int(np.count_nonzero(a | b))
        return ("text-mask IoU" if name == "det" else "confident-anchor IoU"), inter / union if union else 1.0
    if name in ("bert", "vit"):  # hidden states (1 x tokens x width); LayerNorm makes every token's norm alike,
        # so the pooled cosine is their mean: the worst token says what the mean hides
        cos = [np.sum(r[k] * g[k], -1) / (np.linalg.norm(r[k], axis=-1) * np.linalg.norm(g[k], axis=-1) + 1e-12)
               for r, g in zip(refs, gots) for k in r]
        return "worst token cosine", float(np.min(np.concatenate([c.ravel() for c in cos])))
    agree = [(r["output"] > 0.5) == (g["output"] > 0.5) for r, g in zip(refs, gots)]
    return "speech decision agreement", float(np.mean(np.concatenate([a.ravel() for a in agree])))


def int8_share(fp32, q) -> tuple[int, int]:
    """(compute layers of ``q`` in INT8, compute layers of ``fp32``), subgraphs included: trtconv's one
    definition (``trtconv.precision.int8.gate.in_int8``: data *and* weight through DequantizeLinear, what TensorRT
    runs in INT8). Both, because ONNX Runtime also puts Q/DQ on the outputs of the layers it quantizes: a layer
    it was told to exclude can still read its data through a DequantizeLinear, with float weights."""
    from trtconv.onnxutil.walk import iter_graphs
    from trtconv.precision.int8 import int8_layers_written
    from trtconv.precision.int8.gate import COMPUTE_OPS

    total = sum(1 for g in iter_graphs(fp32.graph) for n in g.node if n.op_type in COMPUTE_OPS)
    return int8_layers_written(q), total


def evaluate(name: str, fp32_path: str, candidate: str, held, memo: list) -> dict:
    """The written model against FP32 on the held-out samples: the gate's statistics and verdict (default
    INT8 thresholds), the task metric, the INT8 share. ``memo``: FP32's outputs, computed once per model."""
    import onnx

    from trtconv.precision.int8.accuracy import accuracy_report
    from trtconv.reference import ort
    from trtconv.reference.compare import DEFAULT_THRESHOLDS, violations

    fp32 = onnx.load(fp32_path)
    q = onnx.load(candidate)
    stats, n = accuracy_report(fp32, q, held, optimize=False, memo=memo)
    cand_sess = ort.session(q, optimize=False)
    refs, gots = [], []
    for ref, s in zip(memo, held):
        refs.append({k: v for k, v in ref.items() if np.asarray(v).dtype.kind == "f"})
        got = ort.run(cand_sess, s, list(refs[-1]))
        gots.append({k: np.asarray(got[k], dtype=np.float32) for k in refs[-1]})
    metric, value = task_metric(name, refs, gots)
    quantized, total = int8_share(fp32, q)
    return {"cosine": min(s.cosine for s in stats), "metric": metric, "value": value, "held": n,
            "gate": not violations(list(stats), DEFAULT_THRESHOLDS["int8"]), "int8": quantized, "layers": total,
            "share": quantized / total if total else 0.0, "qdq": base.qdq_count(q),
            "fp16": any(t.data_type == onnx.TensorProto.FLOAT16 for t in q.graph.initializer)}


# ----------------------------------------------------------------------------- parent


def quantize(args, root: Path, name: str, spec: dict, held, memo: list, tool: str, method: str,
             tag: str, **extra) -> dict:
    """Run one quantization in its own process and evaluate what it wrote."""
    out = str(root / f"{name}-{tool}-{method.replace('/', '_')}-{tag}.onnx")
    python = args.modelopt_python if tool == "modelopt" else sys.executable
    t0 = time.perf_counter()
    proc = subprocess.run([python, __file__, "--child", tool, method, json.dumps({**spec, **extra}), out],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    wall = time.perf_counter() - t0
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    info = json.loads(last) if last.startswith("{") else {"error": proc.stderr.strip()[-200:]}
    row = {"model": name, "tool": tool, "method": method, "process_s": wall, **info}
    if not info.get("error") and Path(out).exists():
        try:
            row.update(evaluate(name, spec["model"], out, held, memo))
        except Exception as exc:
            row["error"] = f"evaluation: {type(exc).__name__}: {_first_line(exc)}"
    elif not info.get("error"):
        row["error"] = "no model written"
    return row


def share_search(args, root, name, spec, held, memo, tool, method, full: dict, ranking: list[str]) -> dict:
    """The INT8 share at which ``tool``/``method`` first passes the gate: trtconv's own auto-exclude; a peer's
    layers kept out in ``ranking`` order at each share of ``--steps``. Returns the passing (or last) row."""
    if full.get("error") or full.get("gate"):
        return full
    if tool == "trtconv":
        return quantize(args, root, name, spec, held, memo, tool, method, "search", auto_exclude=True)
    row = full
    for share in args.steps:
        k = math.ceil((1 - share) * full["layers"] - 1e-9)
        row = quantize(args, root, name, spec, held, memo, tool, method, f"s{share}", exclude=ranking[:k])
        row["excluded"] = min(k, len(ranking))
        if row.get("gate"):
            break
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cls,rec,det,yolo,dddd,silero16k,bert,vit")
    ap.add_argument("--modelopt-python", default=sys.executable,
                    help="interpreter with nvidia-modelopt[onnx] installed (its own venv: it pins onnx versions)")
    ap.add_argument("--tools", default=",".join(f"{t}:{m}" for t, m in TOOLS), help="tool:method,...")
    ap.add_argument("--steps", default="0.75,0.5", type=lambda v: [float(x) for x in v.split(",")],
                    help="peers' INT8 shares tried, in order, after full INT8 misses the gate")
    ap.add_argument("--entropy-steps", action="store_true", help="also search ORT Entropy's share (slow)")
    ap.add_argument("--skip-ort-entropy", action="store_true", help="ORT's 2048-bin entropy takes minutes per model")
    ap.add_argument("--full", action="store_true", help="32 calibration samples per image model instead of 16")
    ap.add_argument("--silero16k-speech", choices=("recorded", "synthetic"), default="recorded",
                    help="silero16k's audio: the recorded sentence (default) or tests/realdata.py's synthesised speech")
    ap.add_argument("--silero16k-held", default="100-103", metavar="FIRST-LAST",
                    help="silero16k's held-out seeds (calibration is always seeds 0-3)")
    ap.add_argument("--json", type=Path, help="also write every row here")
    ap.add_argument("--child", nargs=4, metavar=("TOOL", "METHOD", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], json.loads(args.child[2]), args.child[3])
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.models.split(","):
            rows += run_model(args, root, name)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))


def model_spec(args, root: Path, name: str) -> dict:
    if name in ("yolo", "dddd"):
        return image_data(root, name, quick=not args.full)
    if name in ("bert", "vit"):
        import int8_methods  # the generated transformers and their samples, shared with that benchmark

        return int8_methods.extra_data(root, {name})[name]
    if name == "silero16k":
        first, last = (int(x) for x in args.silero16k_held.split("-"))
        return silero16k_data(root, args.silero16k_speech, range(first, last + 1))
    if not (root / name).exists():
        for k, v in base.make_data(root, quick=not args.full).items():
            (root / f"{k}.json").write_text(json.dumps(v))
    return json.loads((root / f"{name}.json").read_text())


def run_model(args, root: Path, name: str) -> list[dict]:
    import onnx

    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    spec = model_spec(args, root, name)
    # peers may write beside or over the model they are given (one rewrote the installed PP-OCR file with
    # inferred shapes): each gets a private copy, never the package's file
    private = root / f"{name}-input.onnx"
    shutil.copyfile(spec["model"], private)
    spec = {**spec, "model": str(private)}
    held = SampleSet(SampleSource.detect(spec["held"]), model_inputs(onnx.load(spec["model"])))
    memo: list = []
    rows, ranking = [], []
    for item in args.tools.split(","):
        tool, method = item.split(":")
        if args.skip_ort_entropy and (tool, method) == ("ort", "Entropy"):
            continue
        full = quantize(args, root, name, spec, held, memo, tool, method, "full")
        if tool == "modelopt" and full.get("error"):
            full = quantize(args, root, name, spec, held, memo, tool, f"{method}/fp32-rest", "full")
        ranking = ranking or full.pop("ranking", [])
        full.pop("ranking", None)
        if (tool, method) == ("ort", "Entropy") and not args.entropy_steps:
            passing = full
        else:
            passing = share_search(args, root, name, spec, held, memo, tool, full["method"], full, ranking)
            passing.pop("ranking", None)
        row = {**full, "pass": {k: passing.get(k) for k in ("gate", "share", "int8", "cosine", "value",
                                                           "auto_excluded", "excluded", "error", "seconds")}}
        row["pass"]["searched"] = passing is not full or bool(full.get("gate"))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def _first_line(exc: BaseException) -> str:
    """The error's first line, whole (a cut one loses names and numbers)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def table(rows: list[dict]) -> str:
    lines = ["| model | tool | method | full INT8: share | min cosine | task metric | value | gate | calib s "
             "| first passing share | its min cosine | its metric | note |", "|" + "---|" * 13]
    for r in rows:
        p = r["pass"]
        share = f"{r['int8']}/{r['layers']} ({r['share']:.0%})" if "share" in r else "-"
        if p.get("gate"):
            passing = f"{p['int8']}/{r['layers']} ({p['share']:.0%})"
        elif r.get("error") or p.get("error"):
            passing = "-"
        else:
            passing = ("not searched" if not p.get("searched", True) or p.get("share") is None
                       else f"fails at {p['share']:.0%}")
        method = r["method"] + (f" → {r['chosen']}" if r.get("chosen") not in (None, r["method"]) else "")
        lines.append(f"| {r['model']} | {r['tool']} | {method} | {share} | {base._fmt(r, 'cosine', '.4f')} | "
                     f"{r.get('metric', '-')} | {base._fmt(r, 'value', '.3f')} | "
                     f"{'-' if 'gate' not in r else ('pass' if r['gate'] else 'fail')} | "
                     f"{base._fmt(r, 'seconds', '.1f')} | {passing} | {base._fmt(p, 'cosine', '.4f')} | "
                     f"{base._fmt(p, 'value', '.3f')} | {(r.get('error') or p.get('error') or '').replace('|', '/')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
