"""ONNX Runtime-quantized variants of a float model, for benchmarks/build_coverage.py.

A stand-in with the interface helper `quant` delivers (its version replaces this one): dynamic
(``quantize_dynamic``), static QDQ and static QOperator (``quantize_static``, int8 per channel, calibrated on the
given seeded inputs) after ``quant_pre_process``, each written beside the others in ``out_dir``."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def quantized_variants(float_onnx: Path, out_dir: Path,
                       calib_inputs: list[dict[str, np.ndarray]]) -> list[tuple[str, Path]]:
    """(label, path) of each quantized variant of ``float_onnx`` that ONNX Runtime could write."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calib_inputs)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = float_onnx.stem
    # the shape inference ONNX Runtime's guide runs first (its quantizers need the shapes); its
    # optimization step is skipped (it merges the equal zero biases of seeded models)
    src = out_dir / f"{stem}.pre.onnx"
    quant_pre_process(str(float_onnx), str(src), skip_optimization=True)
    made: list[tuple[str, Path]] = []
    dynamic = out_dir / f"{stem}.dyn.onnx"
    quantize_dynamic(str(src), str(dynamic))
    made.append(("dyn", dynamic))
    for label, fmt in (("qdq", QuantFormat.QDQ), ("qop", QuantFormat.QOperator)):
        path = out_dir / f"{stem}.{label}.onnx"
        try:
            quantize_static(str(src), str(path), Reader(), quant_format=fmt, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, per_channel=True)
        except Exception as exc:  # the quantizers raise anything: one variant failing skips only it
            print(f"skip {stem}.{label}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        made.append((label, path))
    return made
