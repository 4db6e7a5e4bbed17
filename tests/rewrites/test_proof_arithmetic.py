"""Proof tolerances fit the arithmetic (issue 26, item 3): a graph that computes in FP16 (FP16
initializers between Casts, FP32 inputs and outputs) is proven at FP16's tolerance, says so, and
builds at FP32 and FP16. Constant folding of its ``Sqrt(constant)`` nodes moves where ONNX Runtime
rounds to FP16: about 2e-6 of difference, over FP32's 1e-6."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from textmodels import INPUTS, bert_like

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import load_model
from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.proof import FP16_RTOL, arithmetic
from trtconv.rewrites.rewrite_settings import GRAPH_RTOL


def test_arithmetic_is_the_narrowest_float_type_computed_in(tmp_path):
    assert arithmetic(onnx.load(bert_like(tmp_path / "a.onnx"))) == "float32"
    assert arithmetic(onnx.load(bert_like(tmp_path / "b.onnx", fp16=True))) == "float16"


def test_fp16_graph_is_proven_at_fp16_tolerance(tmp_path):
    loaded = load_model(bert_like(tmp_path / "half.onnx", fp16=True))
    result = rewrite(loaded, RewriteSettings(shapes={n: (2, 8) for n in INPUTS}))
    proof = result.report.graph_proof
    assert proof.method == "onnxruntime" and proof.passed
    assert proof.arithmetic == "float16" and proof.tolerance == pytest.approx(FP16_RTOL)
    assert GRAPH_RTOL < proof.max_abs <= proof.tolerance  # FP32's tolerance would have called it changed
    assert "(float16 arithmetic)" in result.report.to_text()
    fp32 = rewrite(load_model(bert_like(tmp_path / "full.onnx")), RewriteSettings(shapes={n: (2, 8) for n in INPUTS}))
    assert fp32.report.graph_proof.arithmetic == "float32"
    assert fp32.report.graph_proof.tolerance == pytest.approx(GRAPH_RTOL)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fp16_graph_builds_with_tensorrt_rtx(tmp_path, precision):
    pytest.importorskip("tensorrt_rtx")
    model = bert_like(tmp_path / "half.onnx", fp16=True, batch=2, seq=8)  # static: build's rewrite proves it
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "half.engine"), "--trt", "rtx",
                                   "--precision", precision, "--json"])
    assert res.exit_code == ExitCode.OK, res.output
    (stage,) = [s for s in json.loads(res.stdout)["stages"] if s["name"] == "rewrite"]
    assert stage["graph_proof"]["arithmetic"] == "float16" and stage["graph_proof"]["passed"]
    # no rule applies: handed on untouched, identical, so no tolerance is used (the float16 graph tolerance is
    # pinned in test_proof_tolerance.py)
    assert stage["graph_proof"]["method"] == "identical" and stage["graph_proof"]["tolerance"] is None
