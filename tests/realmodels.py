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


def magika_model() -> Path:
    """Google's magika file-type classifier (int32 byte features, dynamic batch)."""
    return _package_dir("magika") / "models" / "standard_v3_3" / "model.onnx"


def nudenet_model() -> Path:
    """NudeNet 3.4's detector: a YOLOv8n exported with dynamic batch and image size."""
    return _package_dir("nudenet") / "320n.onnx"


def ddddocr_model(name: str = "common_det.onnx") -> Path:
    """ddddocr's models: 'common_det.onnx' (a YOLOX-style text detector, static 416x416), 'common_old.onnx'
    (a CRNN recognizer quantized by ONNX Runtime into QLinear/ConvInteger-style Q/DQ nodes)."""
    return _package_dir("ddddocr") / name


def onnx_asr_model(name: str = "wespeaker.onnx") -> Path:
    """onnx-asr's audio front-ends (its preprocessors): 'wespeaker.onnx' is a Kaldi-style filterbank of
    WeSpeaker (waveforms [batch, N] and their lengths -> features [batch, frames, 80]) with one 512-point DFT."""
    return _package_dir("onnx_asr") / "preprocessors" / "data" / name
