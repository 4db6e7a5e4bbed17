"""Models quantized by ONNX Runtime build on TensorRT-RTX with one `trtconv build`. A real one shipped pre-quantized:
ddddocr's `common_old.onnx` (ConvInteger, MatMulInteger, DynamicQuantizeLinear,
com.microsoft::DynamicQuantizeLSTM) becomes float ops on dequantized weights, and its output is
reported against the original (the manifest's `rewrite_drift`; here also the decoded text of
rendered lines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from realdata import text_line_image
from realmodels import ddddocr_model

from trtconv.cli.main import cli
from trtconv.reference.ort import run, session

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

PROFILE = ["--min-shapes", "input1:1x1x64x64", "--opt-shapes", "input1:1x1x64x224",
           "--max-shapes", "input1:1x1x64x512"]


def _ddddocr_input(seed: int) -> np.ndarray:
    """ddddocr's own preprocessing: grey, height 64, [-1, 1]."""
    img = text_line_image(seed=seed, height=64).convert("L")
    img = img.resize((max(64, int(img.size[0] * 64 / img.size[1])), 64))
    return ((np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5)[None, None]


def _ctc(logits: np.ndarray) -> list[int]:
    best = logits.argmax(-1).reshape(-1)
    return [int(c) for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])]


def test_ddddocr_common_old_builds_on_rtx_and_reads_the_same_text(tmp_path):
    model = ddddocr_model("common_old.onnx")
    engine, prepared = tmp_path / "old.engine", tmp_path / "old.prepared.onnx"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(engine),
                                   "--prepared", str(prepared), *PROFILE])
    assert res.exit_code == 0, res.output
    m = json.loads(Path(str(engine) + ".json").read_text())
    rules = {r["rule"] for r in m["rewrites"]}
    assert rules == {"ort-dynamic-integer", "ort-dynamic-lstm"}
    assert len(m["rewrites"]) == 23 and all(r["proof"]["passed"] for r in m["rewrites"])
    drift = m["rewrite_drift"]  # the whole model against the original, at the profile's opt shape
    assert drift["shapes"] == {"input1": [1, 1, 64, 224]} and drift["outputs"][0]["cosine"] > 0.999
    ops = {n.op_type for n in onnx.load(str(prepared)).graph.node}
    assert not ops & {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeLSTM"}
    # on rendered text lines the float model reads what the quantized original reads
    original, rewritten = session(onnx.load(str(model))), session(onnx.load(str(prepared)))  # one session each
    same = 0
    for seed in range(4):
        x = _ddddocr_input(seed)
        ref, got = run(original, {"input1": x})["387"], run(rewritten, {"input1": x})["387"]
        same += _ctc(ref) == _ctc(got)
        assert (ref.argmax(-1) == got.argmax(-1)).mean() >= 0.9
    assert same >= 3


def _build_rtx(model: Path, tmp_path: Path) -> dict:
    engine = tmp_path / (model.stem + ".engine")
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(model), "-o", str(engine)])
    assert res.exit_code == 0, res.output
    assert engine.stat().st_size > 1_000
    return json.loads(Path(str(engine) + ".json").read_text())


def test_dynamic_quantized_fused_bert_builds_on_rtx(tmp_path):
    """quantize_dynamic on ONNX Runtime's fused BERT ops: QEmbedLayerNormalization, QAttention (and its
    DynamicQuantizeLinear) -> standard ONNX; the dropped activation rounding is measured and reported."""
    from onnxruntime.quantization import quantize_dynamic
    from quantized_transformer_models import bert_block_model

    q = tmp_path / "bert.dyn.onnx"
    quantize_dynamic(str(bert_block_model(tmp_path / "bert.onnx")), str(q))
    m = _build_rtx(q, tmp_path)
    assert {r["rule"] for r in m["rewrites"]} == {"ort-qattention", "ort-qembed-layernorm"}
    assert all(r["proof"]["passed"] and r["proof"]["method"] == "onnxruntime" for r in m["rewrites"])
    assert m["rewrite_drift"]["outputs"][0]["cosine"] > 0.999


def test_matmul_nbits_builds_on_rtx_as_int4_weights(tmp_path):
    """MatMulNBitsQuantizer's 4-bit blocked weights (opset 21) -> an int4 blocked DequantizeLinear +
    MatMul, which TensorRT-RTX builds as weight-only INT4; the same numbers as the original."""
    from quantized_transformer_models import linear_model, nbits_quantized

    q = nbits_quantized(linear_model(tmp_path / "linear.onnx", 21), tmp_path / "linear.w4.onnx")
    m = _build_rtx(q, tmp_path)
    (r,) = m["rewrites"]
    assert r["rule"] == "ort-matmul-nbits" and r["target"].startswith("DequantizeLinear (int4, blocked)")
    assert r["proof"]["passed"] and r["proof"]["outputs"][0]["max_abs"] == 0.0
