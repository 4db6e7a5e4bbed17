"""Input/weight dtype models for benchmarks/build_coverage.py.

A torchvision classifier wrapped to take a uint8 NHWC camera frame (normalised inside: the
``Transpose`` of a uint8 input is what TensorRT refuses), and float64 models, a CNN and a
transformer in ``.double()`` (the parser narrows float64 to float32 without a word)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import coverage_torchvision as tv
from coverage_models import Generated, first_line

FAMILY = "dtypes"


def generate(folder: Path, keep: Callable[[str], bool], python: str | None) -> Iterator[Generated]:
    for name, base, variant in (("uint8-nhwc-resnet18", "resnet18", "uint8-nhwc"),
                                ("float64-resnet18", "resnet18", "float64")):
        if not keep(name):
            continue
        if not python:
            yield Generated(FAMILY, name, None, "skipped: no --torchvision-python given")
            continue
        out = folder / f"{name}.onnx"
        try:
            shapes = tv.export_in_child(python, base, variant, out)
            yield Generated(FAMILY, name, out, shapes=tuple(shapes.items()))
        except Exception as exc:
            yield Generated(FAMILY, name, None, f"export failed: {first_line(exc)}")
    if keep("float64-vit"):
        import coverage_transformers as ct

        spec = next(s for s in ct.specs() if s.name == "vit")
        try:
            path, shapes = ct.export(spec, folder, double=True)
            yield Generated(FAMILY, "float64-vit", path, shapes=tuple(shapes.items()))
        except Exception as exc:
            yield Generated(FAMILY, "float64-vit", None, f"export failed: {first_line(exc)}")
