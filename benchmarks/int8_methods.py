"""What each of ``method="auto"``'s parts does, per real model: full-INT8 worst output cosine on the
held-out samples and the INT8 share at which ``--auto-exclude`` passes the default gate.

Rows per model and variant (``--variants``): ``auto`` (whole-model candidates only),
``auto+per-tensor`` (the per-tensor mix as one more candidate), ``auto+bias`` (bias correction),
``auto+both`` (the default: one run whose report scores the whole-model candidates, the per-tensor
mix and the bias correction each; ``stage_start_s`` says when each stage began). Data: ``quantize_vs_ort.make_data`` (PP-OCR cls/rec/det, Silero), the same npz samples
the peers benchmark uses.

    python benchmarks/int8_methods.py [--models cls,rec,det,silero] [--variants auto,auto+per-tensor]
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
sys.path.insert(0, str(HERE.parent / "tests"))

import quantize_vs_ort as base  # noqa: E402

VARIANTS = {
    "auto": {"auto_per_tensor": False, "auto_bias_correction": False},
    "auto+per-tensor": {"auto_per_tensor": True, "auto_bias_correction": False},
    "auto+bias": {"auto_per_tensor": False, "auto_bias_correction": True},
    "auto+both": {"auto_per_tensor": True, "auto_bias_correction": True},  # the report scores each part
}


def measure(name: str, spec: dict, variant: str, auto_exclude: bool) -> dict:
    import onnx

    from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, Int8ShareError, quantize_int8
    from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

    model = onnx.load(spec["model"])
    inputs = model_inputs(model)
    calib = SampleSet(SampleSource.detect(Path(spec["calib"])), inputs)
    held = SampleSet(SampleSource.detect(Path(spec["held"])), inputs)
    settings = replace(Int8Settings(method="auto"), **VARIANTS[variant], auto_exclude=auto_exclude,
                       min_share=0.5 if auto_exclude else 0.0)
    t0 = time.perf_counter()
    stages: dict[str, float] = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        stages.setdefault(stage, time.perf_counter() - t0)

    try:
        r = quantize_int8(model, settings, calib, eval_samples=held, progress=progress).report
        error = ""
    except (Int8AccuracyError, Int8ShareError) as exc:
        r, error = exc.result.report, type(exc).__name__
    compute = {(p.graph, p.node) for p in r.placed if p.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm")}
    excluded = len(r.auto_excluded)
    row = {"model": name, "variant": variant, "auto_exclude": auto_exclude, "chosen": r.chosen_method,
           "worst_cosine": round(min((s.cosine for s in r.accuracy), default=1.0), 5),
           "passed": r.passed, "int8_layers": len(compute), "excluded": excluded, "error": error,
           "calib_s": round(r.calibration_seconds, 2), "total_s": round(time.perf_counter() - t0, 1),
           "choice": {o.label: round(o.worst_cosine, 5) for o in r.calibration_choice}}
    if r.per_tensor is not None:
        row["per_tensor"] = r.per_tensor.counts()
    if r.bias_correction is not None:
        row["bias"] = r.bias_correction.to_json()
    row["stage_start_s"] = {k: round(v, 1) for k, v in stages.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="cls,rec,det,silero")
    ap.add_argument("--variants", default="auto+both")
    ap.add_argument("--auto-exclude", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        specs = base.make_data(Path(tmp), quick=True)
        for name in args.models.split(","):
            for variant in args.variants.split(","):
                print(json.dumps(measure(name, specs[name], variant, args.auto_exclude)), flush=True)


if __name__ == "__main__":
    main()
