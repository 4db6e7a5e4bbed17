"""The proofs' tolerances, pinned (issue 33): each as a number of machine epsilons of its arithmetic, and
a planted replacement off by just over the bound (must fail) and just under it (must pass), per
arithmetic: float32 node and graph proofs, float16, bfloat16, and a quantized bound."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from trtconv.rewrites.proof import (
    BF16_RTOL,
    FP16_RTOL,
    QUANT_SLACK,
    NodeProofCase,
    bound_rtol,
    half_step,
    prove_graph,
    prove_node,
)
from trtconv.rewrites.rewrite_settings import GRAPH_RTOL, NODE_RTOL

EPS = {"float32": float(np.finfo(np.float32).eps), "float16": float(np.finfo(np.float16).eps),
       "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)}


def test_each_tolerance_is_a_pinned_number_of_epsilons_of_its_type():
    """Loosening any tolerance fails here first: the values, and what they are in units of their type."""
    assert (NODE_RTOL, GRAPH_RTOL, FP16_RTOL, BF16_RTOL, QUANT_SLACK) == (1e-5, 1e-6, 1e-2, 6e-2, 1e-3)
    assert EPS == {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
    assert round(NODE_RTOL / EPS["float32"], 1) == 83.9  # a replacement reorders sums of a few hundred terms
    assert round(GRAPH_RTOL / EPS["float32"], 1) == 8.4  # a clean-up changes no arithmetic
    assert round(FP16_RTOL / EPS["float16"], 2) == 10.24
    assert round(BF16_RTOL / EPS["bfloat16"], 2) == 7.68
    assert half_step(0.1) == pytest.approx(0.05 * (1 + QUANT_SLACK), rel=1e-15)


def _shifted(delta: float, dtype: np.dtype) -> list[gs.Node]:
    """A replacement that computes x + delta: the original (identity) off by exactly delta."""
    x = gs.Variable("x", dtype=dtype, shape=(4, 8))
    y = gs.Variable("y", dtype=dtype, shape=(4, 8))
    return [gs.Node("Add", "planted", inputs=[x, gs.Constant("delta", np.full((1,), delta, dtype))], outputs=[y])]


def _node_proof(delta: float, dtype: type, rtol: float = NODE_RTOL) -> bool:
    x = np.random.default_rng(0).uniform(0.0, 0.25, (4, 8)).astype(dtype)  # max |ref| < 1: tolerance == rtol
    case = NodeProofCase(_shifted(delta, np.dtype(dtype)), "y", {"x": x}, x.astype(np.float64), np.dtype(dtype), 17,
                         rtol=rtol)
    proof = prove_node(case)
    assert proof.tolerance == pytest.approx(max(rtol, FP16_RTOL) if dtype == np.float16 else rtol)
    return proof.passed


@pytest.mark.parametrize(("dtype", "bound"), [(np.float32, NODE_RTOL), (np.float16, FP16_RTOL)])
def test_a_node_replacement_just_over_its_types_bound_fails(dtype, bound):
    assert not _node_proof(bound * 1.1, dtype)
    assert _node_proof(bound * 0.9, dtype)


def test_a_quantized_replacement_just_over_its_derived_bound_fails():
    """A quantized replacement may differ by half a quantization step (plus the float32 node tolerance)."""
    x = np.random.default_rng(0).uniform(0.0, 0.25, (4, 8))
    step = 0.1
    rtol = bound_rtol(half_step(step), x, NODE_RTOL)
    assert rtol == pytest.approx(step / 2 * (1 + QUANT_SLACK) + NODE_RTOL, rel=1e-12)
    assert not _node_proof(rtol * 1.01, np.float32, rtol)
    assert _node_proof(rtol * 0.99, np.float32, rtol)


def _graph(delta: float, half: int | None) -> object:
    """y = x (through a round trip in ``half`` when given) + delta."""
    nodes, cur = [], "x"
    if half is not None:
        nodes += [helper.make_node("Cast", ["x"], ["h"], to=half), helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT)]
        cur = "f"
    nodes.append(helper.make_node("Add", [cur, "delta"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                          initializer=[helper.make_tensor("delta", TensorProto.FLOAT, [1], [delta])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize(("half", "bound", "arithmetic"), [(None, GRAPH_RTOL, "float32"),
                                                            (TensorProto.FLOAT16, FP16_RTOL, "float16"),
                                                            (TensorProto.BFLOAT16, BF16_RTOL, "bfloat16")])
def test_a_graph_moved_just_over_its_arithmetics_bound_fails(half, bound, arithmetic):
    """The whole-graph proof of a graph computing in ``arithmetic``: outputs moved by 1.2x its bound fail,
    by 0.8x pass (random inputs are standard normal: the bound scales with max |y|, read from the proof)."""
    before = _graph(0.0, half)
    same = prove_graph(before, _graph(0.0, half), {}, set(), 0)
    assert same.arithmetic == arithmetic and same.passed and same.scope["outputs_compared"] == []  # nothing moved
    probe = prove_graph(before, _graph(bound * 1e-3, half), {}, set(), 0)
    assert probe.passed and probe.scope["outputs_compared"] == ["y"]
    scale = probe.tolerance / bound  # max(1, max |reference|)
    assert scale >= 1.0
    for factor, passes in ((1.2, False), (0.8, True)):
        proof = prove_graph(before, _graph(bound * scale * factor, half), {}, set(), 0)
        assert proof.passed is passes, (factor, proof)
