"""Real ONNX models with real trained weights, shipped inside PyPI packages (the `test` extra)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"package {name} is missing: run `make install` (it is in the test extra)")
    return Path(next(iter(spec.submodule_search_locations)))


def rapidocr_model(kind: str) -> Path:
    """PP-OCR models: kind is 'det' (PP-OCRv4 detector), 'rec' (recognizer) or 'cls' (angle classifier)."""
    names = {
        "det": "ch_PP-OCRv4_det_infer.onnx",
        "rec": "ch_PP-OCRv4_rec_infer.onnx",
        "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    }
    return _package_dir("rapidocr_onnxruntime") / "models" / names[kind]


def silero_model(name: str = "silero_vad.onnx") -> Path:
    """Silero VAD models; the default one keeps its network inside If subgraphs."""
    return _package_dir("silero_vad") / "data" / name
