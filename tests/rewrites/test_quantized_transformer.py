"""What ONNX Runtime's quantizers make of transformer and weight-only models -> what TensorRT takes
(trtconv/rewrites/quantized/: qattention, qembed_layernorm, quantized_gather, matmul_nbits, and
QLinearSoftmax in qoperator). The originals come from ONNX Runtime's own quantizers run on float
graphs built in code; every rewrite is proven against ONNX Runtime's run of the original, and the
real TensorRT-RTX parser refuses each original and takes each rewrite."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from quantized_models import conv_matmul_model, ops_model, quantized_dynamic, quantized_static
from quantized_transformer_models import (
    HIDDEN,
    SEQ,
    VOCAB,
    bert_block_model,
    embedding_model,
    linear_model,
    nbits_quantized,
    qlinear_add_chain,
    qlinear_mul_by_quantized_constant,
    qlinear_scores,
    reshaped_qlinear_output,
    scores_model,
)

from trtconv.analyze import analyze
from trtconv.load import load_model, save_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import rewrite
from trtconv.rewrites.catalog import RULES

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None


def _without(*names: str):
    return tuple(r for r in RULES if r.name not in names)


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _rtx_parses(model: onnx.ModelProto, tmp_path, name: str) -> bool:
    from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

    path = tmp_path / f"{name}.onnx"
    save_model(model, path)
    return parse_and_build(path, import_tensorrt(RTX_MODULE), build=False).parsed


def _bert_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, SEQ), np.int32)
    mask[0, SEQ - 2:] = 0  # right padding: mask_index counts the kept keys
    return {"ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int32), "mask": mask}


def test_qattention_and_qembed_layernorm_become_standard_onnx(tmp_path):
    q = onnx.load(quantized_dynamic(bert_block_model(tmp_path / "f.onnx"), tmp_path / "q.onnx"))
    assert {"QEmbedLayerNormalization", "QAttention", "DynamicQuantizeLinear"} <= _ops(q)
    res = rewrite(q)
    assert not {n.domain for n in res.model.graph.node} - {"", "ai.onnx"}  # no com.microsoft op is left
    assert not _ops(res.model) & {"DynamicQuantizeLinear", "QAttention", "QEmbedLayerNormalization"}
    entries = {e.rule: e for e in res.report.rewrites}
    assert set(entries) == {"ort-qattention", "ort-qembed-layernorm"}
    assert all(e.proof.passed and e.proof.method == "onnxruntime" for e in entries.values())
    # QAttention's proof feeds an activation DynamicQuantizeLinear rounds losslessly: float32-tight
    assert entries["ort-qattention"].proof.max_abs < 1e-5
    assert any("DynamicQuantizeLinear" in n and "dropped" in n for n in entries["ort-qattention"].notes)
    assert entries["ort-qembed-layernorm"].proof.max_abs < 1e-5  # the tables dequantized as ONNX Runtime does
    drift = res.report.drift  # the dropped activation rounding, measured on the whole model
    assert drift is not None and drift.stats[0].cosine > 0.999
    for seed in range(3):
        feeds = _bert_feeds(seed)
        got, ref = run_model(res.model, feeds)["y"], run_model(q, feeds)["y"]
        assert got.shape == (1, SEQ, HIDDEN) and np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
    kept = rewrite(q, rules=_without("ort-qattention", "ort-qembed-layernorm"))
    assert {"QAttention", "QEmbedLayerNormalization"} <= _ops(kept.model)


def test_check_names_the_rules_for_qattention_and_qembed_layernorm(tmp_path):
    path = quantized_dynamic(bert_block_model(tmp_path / "f.onnx"), tmp_path / "q.onnx")
    by_op = {n.op_type: n for n in analyze(load_model(path), "rtx").nodes}
    assert (by_op["QAttention"].status, by_op["QAttention"].rewrite) == ("rewritable", "ort-qattention")
    assert (by_op["QEmbedLayerNormalization"].status, by_op["QEmbedLayerNormalization"].rewrite) == \
        ("rewritable", "ort-qembed-layernorm")


def test_quantized_embedding_gather_reads_the_dequantized_table(tmp_path):
    q = onnx.load(quantized_dynamic(embedding_model(tmp_path / "f.onnx"), tmp_path / "q.onnx"))
    inits = {i.name: i for i in q.graph.initializer}
    gather = next(n for n in q.graph.node if n.op_type == "Gather")
    assert inits[gather.input[0]].data_type == onnx.TensorProto.UINT8
    res = rewrite(q)
    entry = next(e for e in res.report.rewrites if e.rule == "ort-quantized-gather")
    assert entry.proof.passed and entry.proof.max_abs == 0.0  # exact
    out_inits = {i.name: i for i in res.model.graph.initializer}
    gather = next(n for n in res.model.graph.node if n.op_type == "Gather")
    assert out_inits[gather.input[0]].data_type == onnx.TensorProto.FLOAT
    assert "DequantizeLinear" not in _ops(res.model)
    ids = np.random.default_rng(0).integers(0, 50, (2, 5)).astype(np.int64)
    got, ref = run_model(res.model, {"ids": ids})["y"], run_model(q, {"ids": ids})["y"]
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
    by_op = {n.op_type: n for n in analyze(load_model(tmp_path / "q.onnx"), "rtx").nodes}
    assert (by_op["Gather"].status, by_op["Gather"].rewrite) == ("rewritable", "ort-quantized-gather")
    kept = rewrite(q, rules=_without("ort-quantized-gather"))
    gather = next(n for n in kept.model.graph.node if n.op_type == "Gather")
    assert {i.name: i for i in kept.model.graph.initializer}[gather.input[0]].data_type == onnx.TensorProto.UINT8


def test_qlinear_softmax_becomes_softmax_between_dequantized_values(tmp_path):
    q = onnx.load(quantized_static(scores_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QOperator"))
    assert "QLinearSoftmax" in _ops(q)
    res = rewrite(q)
    soft = [e for e in res.report.rewrites if e.before.op.endswith("QLinearSoftmax")]
    assert len(soft) == 1 and soft[0].rule == "ort-qoperator" and soft[0].target.startswith("Softmax")
    assert soft[0].proof.passed and soft[0].proof.max_abs <= soft[0].proof.tolerance
    assert not _ops(res.model) & {"QLinearSoftmax", "QLinearMatMul"}
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert np.abs(got - ref).max() < 0.1 * np.abs(ref).max()


def test_qlinear_add_with_a_constant_operand_is_proven_at_the_constant_shape():
    q = qlinear_add_chain()
    res = rewrite(q)
    adds = [e for e in res.report.rewrites if e.before.op.endswith("QLinearAdd")]
    assert len(adds) == 2 and all(e.proof.passed for e in adds), [e.proof.reason for e in adds]
    assert adds[1].proof.shapes  # drawn at the constant's shape (the variable operand's is unknown)
    x = np.random.default_rng(4).uniform(-2, 2, (1, 4, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert np.abs(got - ref).max() <= 0.04 + 1e-6  # within one output step


def test_quantize_linear_of_a_constant_becomes_the_float_it_represents():
    q = qlinear_mul_by_quantized_constant()
    res = rewrite(q)
    (const,) = [e for e in res.report.rewrites if e.before.op == "QuantizeLinear" and e.target.startswith("Constant")]
    assert const.rule == "ort-qdq" and const.proof.passed and const.proof.max_abs == 0.0  # exact
    x = np.random.default_rng(5).uniform(-2, 2, (1, 4, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert np.abs(got - ref).max() <= 0.01 + 1e-6  # within one output step


def test_dequantize_after_a_reshape_of_a_rewritten_qoperator_output_becomes_identity():
    q = reshaped_qlinear_output()
    res = rewrite(q)
    onnx.checker.check_model(res.model, full_check=True)  # no DequantizeLinear left reading float
    assert "DequantizeLinear" not in {n.op_type for n in res.model.graph.node if n.output[0] == "y1"}
    x = np.random.default_rng(7).uniform(-2, 2, (1, 4, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x}), run_model(q, {"x": x})
    assert np.abs(got["y1"] - ref["y1"]).max() <= 0.03 + 1e-6 and np.abs(got["y2"] - ref["y2"]).max() <= 0.02 + 1e-6


def test_qlinear_matmul_of_two_activations_one_of_unknown_shape():
    q = qlinear_scores()
    res = rewrite(q)
    (mm,) = [e for e in res.report.rewrites if e.before.op.endswith("QLinearMatMul")]
    assert mm.proof.passed, mm.proof.reason
    x = np.random.default_rng(9).uniform(-2, 2, (1, 2, 4, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert got.shape == (1, 2, 4, 4) and np.abs(got - ref).max() < 0.1 * np.abs(ref).max()


def test_per_channel_qgemm_with_transposed_weights(tmp_path):
    """quantize_static per channel (what a CNN's classifier head gets): QGemm's B is [N, K] (transB),
    its scales run along N."""
    q = onnx.load(quantized_static(ops_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QOperator", per_channel=True))
    res = rewrite(q)
    (gemm,) = [e for e in res.report.rewrites if e.before.op.endswith("QGemm")]
    assert gemm.proof.passed and gemm.proof.max_abs <= gemm.proof.tolerance
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()


@pytest.mark.parametrize("opset, symmetric, form", [(17, True, "MatMul (dequantized weights)"),
                                                    (21, True, "DequantizeLinear (int4, blocked)+MatMul"),
                                                    (21, False, "MatMul (dequantized weights)")])
def test_matmul_nbits_becomes_matmul_on_the_same_weights(tmp_path, opset, symmetric, form):
    q = onnx.load(nbits_quantized(linear_model(tmp_path / "f.onnx", opset), tmp_path / "q.onnx", symmetric=symmetric))
    assert "MatMulNBits" in _ops(q)
    res = rewrite(q)
    (entry,) = res.report.rewrites
    assert entry.rule == "ort-matmul-nbits" and entry.target == form
    assert entry.proof.passed and entry.proof.max_abs == 0.0  # the same dequantized weights: exact
    if "int4" in form:
        dq = next(n for n in res.model.graph.node if n.op_type == "DequantizeLinear")
        w = {i.name: i for i in res.model.graph.initializer}[dq.input[0]]
        assert w.data_type == onnx.TensorProto.INT4 and len(dq.input) == 2  # zero point 0, as TensorRT takes
        assert {a.name: a.i for a in dq.attribute} == {"axis": 0, "block_size": 32}
    else:
        assert any("opset 21" in n or "symmetric" in n for n in entry.notes)
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_array_equal(run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"])
    assert "MatMulNBits" in _ops(rewrite(q, rules=_without("ort-matmul-nbits")).model)


@pytest.mark.parametrize("activation, weight", [("QInt16", "QInt8"), ("QUInt16", "QUInt8"), ("QInt16", "QInt16")])
def test_sixteen_bit_qdq_becomes_float(tmp_path, activation, weight):
    """quantize_static's 16-bit activations (and weights): TensorRT takes no 16-bit Q/DQ."""
    q = onnx.load(quantized_static(conv_matmul_model(tmp_path / "f.onnx"), tmp_path / "q.onnx", "QDQ", activation,
                                   weight))
    sixteen = {onnx.TensorProto.INT16, onnx.TensorProto.UINT16}
    assert any(i.data_type in sixteen for i in q.graph.initializer)
    res = rewrite(q)
    assert all(e.rule == "ort-qdq" and e.proof.passed for e in res.report.rewrites)
    left = {n.input[2] for n in res.model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
            and len(n.input) > 2}
    assert not [i for i in res.model.graph.initializer if i.name in left and i.data_type in sixteen]
    x = np.random.default_rng(8).standard_normal((1, 3, 6, 6)).astype(np.float32)
    got, ref = run_model(res.model, {"x": x})["y"], run_model(q, {"x": x})["y"]
    assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()  # 16-bit steps: the rounding dropped is tiny
    if HAVE_RTX:
        assert not _rtx_parses(q, tmp_path, "orig") and _rtx_parses(res.model, tmp_path, "rewritten")


@pytest.mark.skipif(not HAVE_RTX, reason="tensorrt-rtx is in the test extra: run `make install`")
def test_rtx_parser_refuses_the_originals_and_takes_the_rewrites(tmp_path):
    cases = {
        "bert": quantized_dynamic(bert_block_model(tmp_path / "b.onnx"), tmp_path / "bq.onnx"),
        "embedding": quantized_dynamic(embedding_model(tmp_path / "e.onnx"), tmp_path / "eq.onnx"),
        "scores": quantized_static(scores_model(tmp_path / "s.onnx"), tmp_path / "sq.onnx", "QOperator"),
        "nbits": nbits_quantized(linear_model(tmp_path / "l.onnx", 21), tmp_path / "lq.onnx"),
    }
    for name, path in cases.items():
        q = onnx.load(path)
        assert not _rtx_parses(q, tmp_path, f"{name}-original"), name
        assert _rtx_parses(rewrite(q).model, tmp_path, f"{name}-rewritten"), name
