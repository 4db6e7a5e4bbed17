"""ONNX Runtime's static quantization (QDQ and QOperator formats) -> what TensorRT takes
(trtconv/rewrites/quantized/qdq_boundary.py, qoperator.py). Originals made by quantize_static from float
graphs built in code; each rewrite proven against ONNX Runtime's run of the original; the real
TensorRT-RTX parser refuses every original and takes every rewrite."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from quantized_models import conv_matmul_model, ops_model, quantized_static

from trtconv.load import save_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import rewrite
from trtconv.rewrites.catalog import RULES, rewrite_rule_for

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None


def _rtx_parses(model: onnx.ModelProto, tmp_path, name: str) -> bool:
    from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

    path = tmp_path / f"{name}.onnx"
    save_model(model, path)
    return parse_and_build(path, import_tensorrt(RTX_MODULE), build=False).parsed


def _without(*names: str):
    return tuple(r for r in RULES if r.name not in names)


def _close(original: onnx.ModelProto, rewritten: onnx.ModelProto, shape, rel: float) -> None:
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ref, got = run_model(original, {"x": x}), run_model(rewritten, {"x": x})
    for k in ref:
        assert np.abs(got[k] - ref[k]).max() <= rel * max(1.0, np.abs(ref[k]).max()), k


def test_the_int32_bias_dequantize_becomes_a_float_constant_exactly(tmp_path):
    """Symmetric int8 QDQ: TensorRT takes every Q/DQ but the int32 bias ones; those alone change."""
    q = onnx.load(quantized_static(conv_matmul_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QDQ",
                                   symmetric=True))
    res = rewrite(q)
    changed = [(e.before.op, e.before.inputs[0], e.target) for e in res.report.rewrites]
    assert changed == [("DequantizeLinear", "B_quantized", "Constant (float)")]  # the Conv's int32 bias
    assert all(e.proof.passed and e.proof.max_abs == 0 for e in res.report.rewrites)  # exact
    assert res.report.drift is None and res.report.graph_proof.passed and res.report.graph_proof.method == "onnxruntime"
    _close(q, res.model, (1, 3, 6, 6), 1e-6)
    assert len(rewrite(q, rules=_without("ort-qdq")).report.rewrites) == 0
    if HAVE_RTX:
        assert not _rtx_parses(q, tmp_path, "orig") and _rtx_parses(res.model, tmp_path, "rewritten")


def test_asymmetric_uint8_qdq_is_kept_in_float_within_half_a_step(tmp_path):
    q = onnx.load(quantized_static(conv_matmul_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QDQ",
                                   "QUInt8", "QUInt8"))
    res = rewrite(q)
    kinds = {e.target for e in res.report.rewrites}
    assert {"Constant (float)", "Clip (float; rounding dropped)", "Identity (input already float)"} <= kinds
    for e in res.report.rewrites:
        assert e.proof.passed
        if e.target.startswith("Clip"):
            assert 0 < e.proof.max_abs <= e.proof.tolerance
    assert res.report.drift is not None and res.report.drift.stats[0].cosine > 0.9999
    _close(q, res.model, (1, 3, 6, 6), 0.05)
    if HAVE_RTX:
        assert not _rtx_parses(q, tmp_path, "orig") and _rtx_parses(res.model, tmp_path, "rewritten")


OPS = ["QLinearConv", "QLinearSigmoid", "QLinearMul", "QLinearLeakyRelu", "QLinearAveragePool", "QLinearConcat",
       "QLinearGlobalAveragePool", "QGemm"]


@pytest.mark.parametrize("symmetric", [False, True], ids=["asymmetric", "symmetric"])
def test_qoperator_ops_become_float_ops(tmp_path, symmetric):
    q = onnx.load(quantized_static(ops_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QOperator",
                                   symmetric=symmetric))
    assert set(OPS) <= {n.op_type for n in q.graph.node}
    assert all(rewrite_rule_for(n.domain, n.op_type) is not None for n in q.graph.node if n.op_type != "Flatten")
    res = rewrite(q)
    by_op = {e.before.op.split("::")[-1]: e for e in res.report.rewrites}
    assert set(OPS) <= set(by_op)
    for op in OPS:
        e = by_op[op]
        assert e.rule == "ort-qoperator" and e.proof.passed and e.proof.max_abs <= e.proof.tolerance, op
        # symmetric int8 stays int8 for TensorRT; anything else is float, clipped to its range
        assert e.target.endswith("(int8)" if symmetric else "(float)"), (op, e.target)
    ops = {n.op_type for n in res.model.graph.node}
    assert not ops & {*OPS, "QLinearMatMul"} and ("QuantizeLinear" in ops) == symmetric
    _close(q, res.model, (1, 3, 8, 8), 0.0 if symmetric else 0.05)
    assert res.report.drift is not None
    kept = rewrite(q, rules=_without("ort-qoperator", "ort-qdq"))  # the Q/DQ at its borders go with it
    assert "QLinearConv" in {n.op_type for n in kept.model.graph.node}
    if HAVE_RTX:
        assert not _rtx_parses(q, tmp_path, "orig") and _rtx_parses(res.model, tmp_path, "rewritten")


def test_qlinear_matmul_with_uint8_weights(tmp_path):
    q = onnx.load(quantized_static(conv_matmul_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QOperator",
                                   "QUInt8", "QUInt8"))
    res = rewrite(q)
    rules = {e.before.op.split("::")[-1]: e.rule for e in res.report.rewrites}
    assert rules["QLinearMatMul"] == rules["QLinearConv"] == rules["QLinearAdd"] == "ort-qoperator"
    assert all(e.proof.passed for e in res.report.rewrites)
    _close(q, res.model, (1, 3, 6, 6), 0.05)
    if HAVE_RTX:
        assert _rtx_parses(res.model, tmp_path, "rewritten")
