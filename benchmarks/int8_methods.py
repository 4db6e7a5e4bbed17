"""What each of ``method="auto"``'s parts does, per real model: full-INT8 worst output cosine on the
held-out samples and the INT8 share at which ``--auto-exclude`` passes the default gate.

Rows per model and variant (``--variants``): ``auto`` (whole-model candidates only),
``auto+per-tensor`` (the per-tensor mix as one more candidate), ``auto+bias`` (bias correction),
``auto+smooth`` (SmoothQuant-style migration), ``auto+bias+smooth`` (the default parts of auto),
``auto+both`` (one run whose report scores the whole-model candidates, the per-tensor
mix and the bias correction each; ``stage_start_s`` says when each stage began). Data: ``quantize_vs_ort.make_data`` (PP-OCR cls/rec/det, Silero), the same npz samples
the peers benchmark uses; ``extra_data`` (NudeNet 320n, ddddocr's float recognizer, the coverage benchmark's generated BERT and
ViT; ``vit-outliers``: that ViT with gamma x20 on three channels of every LayerNorm, the outlier
channels trained transformers carry and random weights lack).

This compares auto's parts, not the gate's claim: the held-out sets are smaller than the claim needs, so
``quantize_int8`` runs with ``unverified=True`` (otherwise refused, exit 11), and ``passed`` says only that every
held-out sample met the gate's limits (the report's ``passed``, the claim, is never True here).

    python benchmarks/int8_methods.py [--models cls,rec,det,silero,nudenet,ddddocr,bert,vit] [--variants auto,auto+per-tensor]
                                      [--auto-exclude]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # appended: tests/triton must not shadow the triton package

import quantize_vs_ort as base  # noqa: E402

VARIANTS = {
    "auto": {"auto_per_tensor": False, "auto_bias_correction": False, "auto_smoothing": False},
    "auto+per-tensor": {"auto_per_tensor": True, "auto_bias_correction": False, "auto_smoothing": False},
    "auto+bias": {"auto_per_tensor": False, "auto_bias_correction": True, "auto_smoothing": False},
    "auto+smooth": {"auto_per_tensor": False, "auto_bias_correction": False, "auto_smoothing": True},
    "auto+bias+smooth": {"auto_per_tensor": False, "auto_bias_correction": True, "auto_smoothing": True},  # default
    "auto+both": {"auto_per_tensor": True, "auto_bias_correction": True},  # the report scores each part
}


def measure(name: str, spec: dict, variant: str, auto_exclude: bool) -> dict:
    import onnx

    from trtconv.precision.int8 import (
        Int8AccuracyError,
        Int8Settings,
        Int8ShareError,
        int8_layers,
        quantize_int8,
    )
    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    model = onnx.load(spec["model"])
    inputs = model_inputs(model)
    calib = SampleSet(SampleSource.detect(Path(spec["calib"])), inputs)
    held = SampleSet(SampleSource.detect(Path(spec["held"])), inputs)
    settings = replace(Int8Settings(method="auto"), **VARIANTS[variant], auto_exclude=auto_exclude,
                       min_share=0.5 if auto_exclude else 0.0, unverified=True)
    t0 = time.perf_counter()
    stages: dict[str, float] = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        stages.setdefault(stage, time.perf_counter() - t0)

    try:
        r = quantize_int8(model, settings, calib, eval_samples=held, progress=progress).report
        error = ""
    except (Int8AccuracyError, Int8ShareError) as exc:
        r, error = exc.result.report, type(exc).__name__
    compute = int8_layers(r.placed)  # the one definition of a layer in INT8 (gate.in_int8)
    excluded = len(r.auto_excluded)
    row = {"model": name, "variant": variant, "auto_exclude": auto_exclude, "chosen": r.chosen_method,
           "worst_cosine": round(min((s.cosine for s in r.accuracy), default=1.0), 5),
           "passed": not r.violations, "int8_layers": len(compute), "excluded": excluded, "error": error,
           "calib_s": round(r.calibration_seconds, 2), "total_s": round(time.perf_counter() - t0, 1),
           "choice": {o.label: round(o.worst_cosine, 5) for o in r.calibration_choice}}
    if r.per_tensor is not None:
        row["per_tensor"] = r.per_tensor.counts()
    if r.bias_correction is not None:
        row["bias"] = r.bias_correction.to_json()
    if r.smoothing is not None:
        row["smoothing"] = r.smoothing.to_json()
    row["stage_start_s"] = {k: round(v, 1) for k, v in stages.items()}
    return row


def extra_data(root: Path, names: set[str], n_cal: int = 16, n_held: int = 6) -> dict[str, dict]:
    """npz samples for NudeNet 320n (a YOLOv8n; rendered document pages, 320x320 RGB in [0, 1]) and
    ddddocr's float recognizer ``common.onnx`` (rendered text lines, gray, height 64, (x/255 - 0.5)/0.5)."""
    import numpy as np
    from realdata import document_image, text_line_image
    from realmodels import ddddocr_model, nudenet_model

    def page(seed: int) -> dict:
        img = np.asarray(document_image(seed, (320, 320)).convert("RGB"), dtype=np.float32) / 255.0
        return {"images": img.transpose(2, 0, 1)[None].copy()}

    def line(seed: int) -> dict:
        img = text_line_image(seed, height=64).convert("L")
        img = img.resize((max(64, min(256, img.width)), 64))
        x = (np.asarray(img, dtype=np.float32) / 255.0 - 0.5) / 0.5
        return {"input1": x[None, None].copy()}

    specs = {}
    makers = [("nudenet", lambda: nudenet_model(), page), ("ddddocr", lambda: ddddocr_model("common.onnx"), line)]
    makers += [(n, lambda n=n: _generated(n, root), _transformer_sample(n)) for n in ("bert", "vit")]
    makers += [("vit-outliers", lambda: _with_outliers(_generated("vit", root)), _transformer_sample("vit"))]
    for name, path, make in makers:
        if name not in names:
            continue
        model = path()
        samples = [make(3000 + s) for s in range(n_cal + n_held)]
        for part, chunk in (("calib", samples[:n_cal]), ("held", samples[n_cal:])):
            d = root / name / part
            d.mkdir(parents=True, exist_ok=True)
            for i, smp in enumerate(chunk):
                np.savez(d / f"{i:03d}.npz", **smp)
        specs[name] = {"model": str(model), "calib": str(root / name / "calib"), "held": str(root / name / "held")}
    return specs


def _generated(name: str, root: Path) -> Path:
    """The coverage benchmark's generated transformer (random weights: no activation outliers to speak of)."""
    import coverage_transformers as cov

    saved = list(sys.path)  # quantize_vs_ort put tests/ first, whose tests/triton shadows the triton package
    sys.path[:] = [p for p in sys.path if Path(p).name != "tests"]
    try:
        spec = next(s for s in cov.specs() if s.name == name)
        return cov.export(spec, root)[0]
    finally:
        sys.path[:] = saved


def _with_outliers(path: Path, channels: tuple[int, ...] = (3, 17, 40), factor: float = 20.0) -> Path:
    """The generated model with a few LayerNorm gamma entries x``factor`` in every LayerNormalization but the
    last (whose output is the model's: outliers there would dominate the cosine the gate measures): the
    activation outlier channels trained transformers carry and random weights do not (SmoothQuant's case)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {t.name: t for t in model.graph.initializer}
    done = {o.name for o in model.graph.output}
    for node in model.graph.node:
        t = inits.get(node.input[1]) if node.op_type == "LayerNormalization" and node.output[0] not in done else None
        if t is not None and t.name not in done:
            done.add(t.name)
            g = numpy_helper.to_array(t).copy()
            g[list(channels)] *= factor
            t.CopyFrom(numpy_helper.from_array(g, t.name))
    out = path.with_name(path.stem + "-outliers.onnx")
    onnx.save(model, str(out))
    return out


def _transformer_sample(name: str):
    """BERT: token ids drawn from the generated vocabulary (varying lengths); ViT: rendered pages at its size."""
    import numpy as np
    from coverage_transformers import IMAGE, SEQ, VOCAB
    from realdata import document_image

    def bert(seed: int) -> dict:
        rng = np.random.default_rng(seed)
        ids = rng.integers(1, VOCAB, (1, SEQ), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones((1, SEQ), np.int64)}

    def vit(seed: int) -> dict:
        img = document_image(seed, (IMAGE * 8, IMAGE * 8)).convert("RGB").resize((IMAGE, IMAGE))
        x = (np.asarray(img, dtype=np.float32) / 255.0 - 0.5) / 0.5
        return {"pixel_values": x.transpose(2, 0, 1)[None].copy()}

    return bert if name == "bert" else vit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cls,rec,det,silero")
    ap.add_argument("--variants", default="auto+both")
    ap.add_argument("--auto-exclude", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        names = set(args.models.split(","))
        specs = base.make_data(Path(tmp), quick=True) if names & {"cls", "rec", "det", "silero"} else {}
        specs.update(extra_data(Path(tmp), names))
        for name in args.models.split(","):
            for variant in args.variants.split(","):
                print(json.dumps(measure(name, specs[name], variant, args.auto_exclude)), flush=True)


if __name__ == "__main__":
    main()
