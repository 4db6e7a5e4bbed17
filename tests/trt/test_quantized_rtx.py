"""A real model shipped pre-quantized by ONNX Runtime builds on TensorRT-RTX with one `trtconv build`:
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
from trtconv.reference.ort import run_model

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
    original, rewritten = onnx.load(str(model)), onnx.load(str(prepared))
    same = 0
    for seed in range(4):
        x = _ddddocr_input(seed)
        ref, got = run_model(original, {"input1": x})["387"], run_model(rewritten, {"input1": x})["387"]
        same += _ctc(ref) == _ctc(got)
        assert (ref.argmax(-1) == got.argmax(-1)).mean() >= 0.9
    assert same >= 3
