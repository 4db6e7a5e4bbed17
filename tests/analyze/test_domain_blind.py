"""Custom-domain ops the parser imports as a *different* ONNX op of the same name (it ignores the
domain): `check` calls them errors on every target, rewritable by their rule, never "supported
with a warning". Where TensorRT-RTX is installed, what its real parser and builder do with them is
measured here too: com.microsoft::Attention fails the import, com.microsoft::RotaryEmbedding parses
and builds (an engine that computes something else)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from fused_builders import I64, Case, In, const, weights

from trtconv.analyze import analyze
from trtconv.load import load_model

B, S, H, N = 2, 4, 8, 2
COS = const("cos", np.cos(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))
SIN = const("sin", np.sin(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))
ATTENTION = Case("Attention", [In("x", (B, S, H)), const("qkv_w", weights((H, 3 * H), 1)),
                               const("qkv_b", weights((3 * H,), 2, 0.1))], attrs={"num_heads": N})
ROTARY = Case("RotaryEmbedding", [In("x", (B, N, S, 8)), In("p", (B, S), I64), COS, SIN])
GELU = Case("Gelu", [In("x", (B, S, H))])  # ONNX Runtime's Gelu is ONNX's exact Gelu: a warning only
TARGETS = ("rtx", "11.4", "10.16")


def save(case: Case, path: Path, opset: int | None = None) -> Path:
    """The case with float outputs (the real parser needs their type) at ``opset``."""
    model = case.model()
    if opset is not None:
        model.opset_import[0].version = opset
    for out in model.graph.output:
        out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnx.save(model, path)
    return path


def node_of(path: Path, target: str):
    (node,) = analyze(load_model(path), target).nodes
    return node


@pytest.mark.parametrize("case, rule", [(ATTENTION, "ms-attention"), (ROTARY, "ms-rotary-embedding")])
@pytest.mark.parametrize("opset", [17, 23])  # 23: the opset where ONNX has Attention and RotaryEmbedding itself
def test_a_colliding_contrib_op_is_an_error_rewritable_by_its_rule_on_every_target(tmp_path, case, rule, opset):
    path = save(case, tmp_path / "m.onnx", opset)
    for target in TARGETS:
        node = node_of(path, target)
        assert (node.status, node.rewrite) == ("rewritable", rule), (target, node)
        (error,) = node.errors
        assert error.rule == "domain-blind-import" and error.stage == "parser"
        assert f"ONNX operator {case.op}" in error.message and rule in error.hint
        assert analyze(load_model(path), target).verdict == "needs-rewrite"


def test_a_contrib_op_with_the_onnx_semantics_stays_a_warning(tmp_path):
    path = save(GELU, tmp_path / "gelu.onnx", 20)
    for target in TARGETS:
        node = node_of(path, target)
        assert node.status == "supported" and [f.rule for f in node.findings] == ["domain-ignored"]


def test_a_declined_form_is_unsupported_not_supported(tmp_path):
    partial = Case("RotaryEmbedding", ROTARY.inputs, attrs={"rotary_embedding_dim": 4, "num_heads": N})
    node = node_of(save(partial, tmp_path / "m.onnx"), "11.4")
    assert node.status == "unsupported" and node.rewrite is None
    assert {f.rule for f in node.errors} == {"domain-blind-import", "rewrite-declined"}


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_rtx") is None, reason="tensorrt_rtx is not installed")
def test_the_real_rtx_parser_ignores_the_domain_as_check_says(tmp_path):
    from trtconv.trt.realparse import import_tensorrt, parse_and_build

    trt = import_tensorrt("tensorrt_rtx")
    attention = parse_and_build(save(ATTENTION, tmp_path / "a.onnx"), trt, build=False)
    assert not attention.parsed
    assert "Q, K, and V" in attention.parser_errors[0].desc  # routed to ONNX's Attention importer
    rotary = parse_and_build(save(ROTARY, tmp_path / "r.onnx"), trt, build=True)
    assert rotary.parsed and rotary.built  # as ONNX RotaryEmbedding, inputs in another order: no error at all
