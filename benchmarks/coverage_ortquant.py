"""The ONNX Runtime-quantized family of benchmarks/build_coverage.py: float models of the other
families (two transformers, two CNNs) quantized by ``coverage_quantized.quantized_variants`` (dynamic,
static QDQ and QOperator, 4-bit MatMulNBits: a row per variant it makes), calibrated on seeded random inputs."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import coverage_torchvision as tv
import coverage_transformers as ct
import numpy as np
from coverage_models import Generated, first_line

FAMILY = "quantized"
TRANSFORMERS, CNNS = ("bert", "vit"), ("resnet18", "mobilenet_v3_small")
CALIB = 8


def calib_inputs(path: Path, shapes: dict[str, tuple[int, ...]], n: int = CALIB) -> list[dict[str, np.ndarray]]:
    """``n`` seeded inputs of the example shapes: token ids, all-ones masks, images in [0, 1)."""
    import onnx

    rng = np.random.default_rng(0)
    kinds = {i.name: i.type.tensor_type.elem_type for i in onnx.load(str(path), load_external_data=False).graph.input}
    out = []
    for _ in range(n):
        sample = {}
        for name, shape in shapes.items():
            if kinds.get(name) == onnx.TensorProto.INT64:
                sample[name] = (np.ones(shape, np.int64) if "mask" in name
                                else rng.integers(0, 100, shape).astype(np.int64))
            else:
                sample[name] = rng.random(shape, dtype=np.float32)
        out.append(sample)
    return out


def _float_model(name: str, folder: Path, python: str | None) -> tuple[Path, dict[str, tuple[int, ...]]]:
    if name in TRANSFORMERS:
        return ct.export(next(s for s in ct.specs() if s.name == name), folder)
    if not python:
        raise RuntimeError("no --torchvision-python given")
    path = folder / f"{name}.onnx"
    return path, tv.export_in_child(python, name, "plain", path)


def generate(folder: Path, keep: Callable[[str], bool], python: str | None) -> Iterator[Generated]:
    from coverage_quantized import VARIANTS, quantized_variants

    for base in TRANSFORMERS + CNNS:
        if not (keep(base) or any(keep(f"{base}.{v}") for v in VARIANTS)):  # --only bert or bert.qdq
            continue
        work = folder / "float"
        work.mkdir(parents=True, exist_ok=True)
        try:
            path, shapes = _float_model(base, work, python)
            with contextlib.redirect_stdout(sys.stderr):  # its progress lines stay out of the table
                made = quantized_variants(path, folder, calib_inputs(path, shapes))
        except Exception as exc:
            yield Generated(FAMILY, f"{base}.*", None, f"quantization failed: {first_line(exc)}")
            continue
        for label, qpath in made:
            if keep(base) or keep(f"{base}.{label}"):
                yield Generated(FAMILY, f"{base}.{label}", qpath, shapes=tuple(shapes.items()))
