"""ONNX Runtime's fused transformer ops -> standard ONNX: every rule on small graphs built in
code, checked twice against ONNX Runtime running the *original* com.microsoft op: by the
rule's own proof, and here on other random inputs. Without its rule a case keeps its fused
node and fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fused_builders import I32, I64, MS, Case, In, const, feeds, weights

from trtconv.analyze import analyze
from trtconv.errors import UsageError
from trtconv.load import load_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.catalog import RULE_NAMES, active_rules, rewrite_rule_for
from trtconv.rewrites.transformer import TRANSFORMER_RULES

B, S, H, N = 2, 4, 8, 2


def x3(name: str = "x", seq: int = S, hidden: int = H) -> In:
    return In(name, (B, seq, hidden))


def ints(name: str, shape, low: int, high: int, dtype=np.int32, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def mask2d(seq: int = S) -> np.ndarray:
    m = np.ones((B, seq), np.int32)
    m[1, seq - 2:] = 0
    return m


QKV_W = const("qkv_w", weights((H, 3 * H), 1))
QKV_B = const("qkv_b", weights((3 * H,), 2, 0.1))
GAMMA = const("gamma", weights((H,), 3) + 1)
BETA = const("beta", weights((H,), 4, 0.1))
BIAS = const("bias", weights((H,), 5, 0.1))
COS = const("cos", np.cos(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))
SIN = const("sin", np.sin(np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]).astype(np.float32))

# name -> (case, integer feeds for the independent check)
CASES: dict[str, tuple[Case, dict[str, np.ndarray]]] = {
    "attention": (Case("Attention", [x3(), QKV_W, QKV_B], attrs={"num_heads": N}), {}),
    "attention-opset13-mask2d": (Case("Attention", [x3(), QKV_W, QKV_B, In("m", (B, S), I32)],
                                      attrs={"num_heads": N}, opset=13), {"m": mask2d()}),
    "attention-opset11-keylengths-causal": (
        Case("Attention", [x3(), QKV_W, QKV_B, In("m", (B,), I32)], attrs={"num_heads": N, "unidirectional": 1},
             opset=11), {"m": np.array([S, 2], np.int32)}),
    "embed-layernorm-opset11": (
        Case("EmbedLayerNormalization", [In("ids", (B, S), I32), None, const("word", weights((11, H), 8)),
                                         const("pos", weights((6, H), 9)), None, GAMMA, BETA, In("m", (B, S), I32)],
             outputs=["y", "mask_index"], opset=11),
        {"ids": ints("ids", (B, S), 0, 11), "m": mask2d()}),
    "simplified-layernorm-opset18": (Case("SimplifiedLayerNormalization", [x3(), GAMMA], domain="", opset=18), {}),
    "rotary-3d-opset11": (Case("RotaryEmbedding", [In("x", (B, S, N * 8)), In("p", (B, S), I64), COS, SIN],
                               attrs={"num_heads": N}, opset=11), {"p": ints("p", (B, S), 0, 16, np.int64)}),
    "attention-keylengths": (Case("Attention", [x3(), QKV_W, QKV_B, In("m", (B,), I32)], attrs={"num_heads": N}),
                             {"m": np.array([S, 2], np.int32)}),
    "attention-mask3d-causal-scale": (
        Case("Attention", [x3(), QKV_W, QKV_B, In("m", (B, S, S), I32)],
             attrs={"num_heads": N, "unidirectional": 1, "scale": 0.3, "mask_filter_value": -1000.0}),
        {"m": np.concatenate([np.ones((B, S, 1), np.int32), ints("m", (B, S, S - 1), 0, 2)], axis=2)}),
    "attention-vsize-bias": (
        Case("Attention", [x3(), const("w", weights((H, 2 * H + 4), 6)), None, None, None, In("ab", (1, N, S, S))],
             attrs={"num_heads": N, "qkv_hidden_sizes": [H, H, 4]}), {}),
    "mha": (Case("MultiHeadAttention", [x3("q"), x3("k", 5), x3("v", 5, 4), const("b", weights((2 * H + 4,), 7)),
                                        In("m", (B, 5), I32)], attrs={"num_heads": N}),
            {"m": mask2d(5)}),
    "mha-causal-attnbias": (Case("MultiHeadAttention", [x3("q"), x3("k"), x3("v"), None, None, In("ab", (B, 1, S, S))],
                                 attrs={"num_heads": N, "unidirectional": 1}), {}),
    "embed-layernorm": (
        Case("EmbedLayerNormalization", [In("ids", (B, S), I32), In("seg", (B, S), I32),
                                         const("word", weights((11, H), 8)), const("pos", weights((6, H), 9)),
                                         const("segemb", weights((2, H), 10)), GAMMA, BETA, In("m", (B, S), I32)],
             outputs=["y", "mask_index", "sum"], attrs={"epsilon": 1e-5}),
        {"ids": ints("ids", (B, S), 0, 11), "seg": ints("seg", (B, S), 0, 2), "m": mask2d() * 3}),
    "embed-layernorm-opset13-posids": (
        Case("EmbedLayerNormalization", [In("ids", (B, S), I32), None, const("word", weights((11, H), 8)),
                                         const("pos", weights((6, H), 9)), None, GAMMA, BETA, None,
                                         In("pids", (1, S), I32)], attrs={"mask_index_type": 0}, opset=13),
        {"ids": ints("ids", (B, S), 0, 11), "pids": np.array([[3, 2, 1, 0]], np.int32)}),
    "skip-layernorm": (Case("SkipLayerNormalization", [x3(), x3("skip"), GAMMA, BETA, BIAS],
                            outputs=["y", "", "", "sum"], attrs={"epsilon": 1e-5}), {}),
    "skip-layernorm-opset13": (Case("SkipLayerNormalization", [x3(), In("skip", (1, S, H)), GAMMA], opset=13), {}),
    "skip-simplified-layernorm": (Case("SkipSimplifiedLayerNormalization", [x3(), x3("skip"), GAMMA, BIAS],
                                       outputs=["y", "", "", "sum"], attrs={"epsilon": 1e-6}), {}),
    "simplified-layernorm": (Case("SimplifiedLayerNormalization", [x3(), GAMMA], domain="",
                                  attrs={"epsilon": 1e-6, "axis": -1}), {}),
    "contrib-layernorm-opset13": (Case("LayerNormalization", [x3(), GAMMA, BETA], domain="", opset=13), {}),
    "bias-gelu": (Case("BiasGelu", [x3(), BIAS]), {}),
    "fast-gelu": (Case("FastGelu", [x3(), BIAS]), {}),
    "fast-gelu-nobias": (Case("FastGelu", [x3()]), {}),
    "gelu": (Case("Gelu", [x3()]), {}),
    "quick-gelu": (Case("QuickGelu", [x3()], attrs={"alpha": 1.5}), {}),
    "bias-add": (Case("BiasAdd", [x3(), BIAS, x3("skip")]), {}),
    "rotary-4d": (Case("RotaryEmbedding", [In("x", (B, N, S, 8)), In("p", (B, S), I64), COS, SIN]),
                  {"p": ints("p", (B, S), 0, 16, np.int64)}),
    "rotary-3d-offset-interleaved": (
        Case("RotaryEmbedding", [In("x", (B, S, N * 8)), In("p", (1,), I64), COS, SIN],
             attrs={"interleaved": 1, "num_heads": N}),
        {"p": np.array([5], np.int64)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_fused_op_becomes_standard_onnx_proven_against_onnx_runtime(name):
    case, int_feeds = CASES[name]
    model = case.model()
    res = rewrite(model)
    out = res.model
    assert not [n for n in out.graph.node if n.domain == MS], "the fused node is still there"
    assert not [n for n in out.graph.node if n.op_type == "SimplifiedLayerNormalization"]
    if case.opset < 17:
        assert not [n for n in out.graph.node if n.op_type == "LayerNormalization"]
    (entry,) = res.report.rewrites
    assert entry.proof.method == "onnxruntime" and entry.proof.passed, entry.proof
    assert entry.proof.max_abs is not None and entry.proof.max_abs <= entry.proof.tolerance
    # independently of the rule's proof: the original op in ONNX Runtime, other random inputs
    f = feeds(model, seed=11, ints=int_feeds)
    ref = {"y": f["x"] + BIAS.value + f["skip"]} if case.op == "BiasAdd" else run_model(model, f)  # CUDA-only op
    got = run_model(out, {i.name: f[i.name] for i in out.graph.input})
    for k, r in ref.items():
        np.testing.assert_allclose(got[k], r, rtol=0, atol=1e-5 * max(1.0, float(np.abs(r).max())))


def test_layernorm_is_the_onnx_op_from_opset_17_and_decomposed_below():
    case, _ = CASES["skip-layernorm"]
    assert "LayerNormalization" in [n.op_type for n in rewrite(case.model()).model.graph.node]
    case13, _ = CASES["skip-layernorm-opset13"]
    ops13 = [n.op_type for n in rewrite(case13.model()).model.graph.node]
    assert "LayerNormalization" not in ops13 and {"ReduceMean", "Sqrt", "Div"} <= set(ops13)


def test_attention_is_matmul_softmax_matmul_with_the_mask_as_an_additive_bias():
    case, _ = CASES["attention-opset13-mask2d"]
    ops = [n.op_type for n in rewrite(case.model()).model.graph.node]
    assert ops.count("Softmax") == 1 and ops.count("MatMul") == 5 and "Where" in ops


def test_every_rule_states_ops_opsets_and_targets_and_the_catalog_knows_it():
    for rule in TRANSFORMER_RULES:
        assert rule.name in RULE_NAMES and rule.ops and rule.opsets[0] <= rule.opsets[1]
        assert rule.targets == ()  # every target: no TensorRT imports these ops
        (domain, op), = rule.ops
        assert rewrite_rule_for(domain, op, rule.opsets[0]) is rule
    # ONNX's own LayerNormalization (opset 17+) is not a contrib op: no rule takes it
    assert rewrite_rule_for("", "LayerNormalization", 17) is None
    assert rewrite_rule_for("", "LayerNormalization", 13) is not None


def test_skip_rule_leaves_that_op_and_unknown_names_are_refused():
    case, _ = CASES["gelu"]
    res = rewrite(case.model(), RewriteSettings(skip_rules=frozenset({"ms-gelu"})))
    assert [n.op_type for n in res.model.graph.node] == ["Gelu"] and not res.report.rewrites
    with pytest.raises(UsageError, match="unknown rewrite rule 'nope'"):
        rewrite(case.model(), RewriteSettings(skip_rules=frozenset({"nope"})))


def test_unsupported_forms_are_left_with_the_reason():
    past = In("past", (2, B, N, 1, H // N))
    case = Case("Attention", [x3(), QKV_W, QKV_B, None, past], outputs=["y", "present"], attrs={"num_heads": N})
    res = rewrite(case.model())
    assert [n.op_type for n in res.model.graph.node] == ["Attention"] and not res.report.rewrites
    assert any("past/present state" in n and "ms-attention" in n for n in res.report.notes), res.report.notes
    rotary = Case("RotaryEmbedding", [In("x", (B, N, S, 8)), In("p", (B, S), I64), COS, SIN],
                  attrs={"rotary_embedding_dim": 4, "num_heads": N})
    res = rewrite(rotary.model())
    assert any("partial rotation" in n for n in res.report.notes)


def test_check_marks_fused_ops_rewritable_and_says_why_a_form_is_not(tmp_path):
    good, _ = CASES["attention"]
    past = In("past", (2, B, N, 1, H // N))
    bad = Case("Attention", [x3(), QKV_W, QKV_B, None, past], outputs=["y", "present"], attrs={"num_heads": N})
    for case, status, rule in ((good, "rewritable", "ms-attention"), (bad, "unsupported", None)):
        path = tmp_path / "m.onnx"
        onnx.save(case.model(), path)
        (node,) = [n for n in analyze(load_model(path), "rtx").nodes if n.op_type == "Attention"]
        assert (node.status, node.rewrite) == (status, rule)
        if rule is None:
            assert any(f.rule == "rewrite-declined" and "past/present state" in f.message for f in node.findings)


def test_build_applies_every_rule_its_target_needs():
    case, _ = CASES["gelu"]
    for target in ("rtx", "10.16", "11.4", None):  # no TensorRT imports these ops: every target needs every rule
        res = rewrite(case.model(), RewriteSettings(target=target))
        assert [e.rule for e in res.report.rewrites] == ["ms-gelu"]
    assert "ms-attention" not in {r.name for r in active_rules(None, skip={"ms-attention"})}
