"""The graph proof sized by the change (issue 34): a rule that fires at the end of a model with a large
unchanged prefix runs that prefix once, on the original, and only its own region on each side; the
outputs the change cannot reach are not compared; each weight is written once for ONNX Runtime, never
copied to be compared with itself. A wrong rewrite there still fails, a folded shape is checked against
what the original computes, and where the region cannot be isolated both whole graphs run, and the
record says why."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import AccuracyError
from trtconv.htmlreport.render import rewrites
from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.proof import Proof, prove_graph
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

WIDTH, LAYERS = 640, 4  # each weight 1.6 MB: over change_scope.COMPARE_BYTES, so known the same by provenance
MS = "com.microsoft"


def _deep(tail: str = "Gelu", domain: str = MS) -> onnx.ModelProto:
    """x -> LAYERS x (MatMul, Add, Relu) -> ``tail`` -> y, and a side output ``feat`` halfway, which
    nothing after it reaches."""
    rng = np.random.default_rng(0)
    nodes, inits, h = [], [], "x"
    for i in range(LAYERS):
        inits += [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / WIDTH**0.5).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"], name=f"relu{i}")]
        h = f"h{i}"
    nodes.append(helper.make_node("Identity", [f"h{LAYERS // 2 - 1}"], ["feat"], name="side"))
    nodes.append(helper.make_node(tail, [h], ["y"], name="tail0", domain=domain))
    g = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, WIDTH]),
                           helper.make_tensor_value_info("feat", TensorProto.FLOAT, [4, WIDTH])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=9)


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def test_a_rule_at_the_end_runs_the_prefix_once_and_only_its_region():
    model = _deep()
    result = rewrite(model, RewriteSettings(step_aside=True))
    assert [e.rule for e in result.report.rewrites] == ["ms-gelu"]
    proof = result.report.graph_proof
    assert proof.method == "onnxruntime" and proof.passed
    scope = proof.scope
    replacement = len(result.model.graph.node) - 3 * LAYERS - 1
    assert scope["whole_graph"] is False and scope["why"] == ""
    assert scope["prefix"] == 3 * LAYERS and scope["boundary"] == 1  # the last Relu's output
    assert scope["region"] == [1, replacement] and scope["nodes_run"] == [3 * LAYERS + 1, replacement]
    assert scope["outputs_compared"] == ["y"] and scope["outputs_unreached"] == ["feat"]
    assert [s.name for s in proof.stats] == ["y"]
    assert scope["weights_written_bytes"] == _weight_bytes(model)  # every weight once: the prefix's, shared
    assert proof.to_json()["scope"] == scope
    assert (f"sized by the change: {3 * LAYERS} original node(s) run once, then the changed region (1 original, "
            f"{replacement} rewritten node(s)); 1 of 2 output(s) reached and compared") in result.report.to_text()
    html = rewrites([], result.report.to_json()["graph_proof"])
    assert f"sized by the change: {3 * LAYERS + 1 + replacement} of {len(model.graph.node) + len(result.model.graph.node)} " \
           "nodes ran, outputs compared: y" in html


class _GeluAsRelu(RewriteRule):
    """Planted: com.microsoft::Gelu "rewritten" as Relu, with no node proof: only the graph proof can see it."""

    name = "planted-gelu-as-relu"
    description = "wrong on purpose"
    ops = ((MS, "Gelu"),)

    def match(self, node: gs.Node, ctx: RuleContext) -> object:
        return True

    def emit(self, ctx: RuleContext, site: Site, match: object) -> Emitted:
        return Emitted((gs.Node("Relu", f"{site.name}/relu", inputs=[site.inputs[0]], outputs=[site.outputs[0]]),),
                       "Relu (wrong)")

    def proof_case(self, ctx: RuleContext, site: Site, match: object, emitted: Emitted) -> Proof:
        return Proof("none", True, reason="planted: no node proof")


def test_a_wrong_rewrite_after_a_large_unchanged_prefix_still_fails():
    model = _deep()
    with pytest.raises(AccuracyError, match="rewrite changed the model's outputs: y: max abs"):
        rewrite(model, RewriteSettings(), rules=(_GeluAsRelu(),))
    res = rewrite(model, RewriteSettings(step_aside=True), rules=(_GeluAsRelu(),))
    [aside] = res.report.stepped_aside
    assert aside.rule == "planted-gelu-as-relu" and "whole-graph proof failed" in aside.reason
    assert [n.op_type for n in res.model.graph.node][-1] == "Gelu"
    # the failing proof itself: the scoped one, comparing the one output the change reaches
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    wrong.graph.node[-1].CopyFrom(helper.make_node("Relu", [f"h{LAYERS - 1}"], ["y"], name="tail0"))
    proof = prove_graph(model, wrong, {}, set(), 0, kept={t.name: t for t in model.graph.initializer})
    assert not proof.passed and [s.name for s in proof.stats] == ["y"] and proof.max_abs > 0.01
    assert proof.scope["whole_graph"] is False and proof.scope["region"] == [1, 1]


def test_large_weights_nothing_vouches_for_count_as_changed():
    """Without provenance a weight over COMPARE_BYTES is not read to be compared: its readers join the region
    (here every layer), and the numbers decide."""
    model = _deep()
    same = onnx.ModelProto()
    same.CopyFrom(model)
    same.graph.node[-1].op_type, same.graph.node[-1].domain = "Erf", ""  # a changed tail; weights copied, unvouched
    proof = prove_graph(model, same, {}, set(), 0, kept={})
    assert not proof.passed and proof.scope["prefix"] == 0 and proof.scope["outputs_compared"] == ["y", "feat"]
    assert proof.scope["region"] == [len(model.graph.node)] * 2 and proof.scope["weights_written_bytes"] > _weight_bytes(model)
    assert {s.name: s.max_abs for s in proof.stats}["feat"] == 0.0  # the layers themselves agree


def _folded(wrong: bool) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """before: Reshape(x, Concat(Shape(x)[0], [-1])) -> Neg; after: the shape folded to a constant (off by one
    element count when ``wrong``: then the check fails and the whole graphs decide)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape_nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
                   helper.make_node("Concat", ["s", "minus1"], ["shape"], axis=0)]
    tail = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    minus1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
    before = helper.make_graph(shape_nodes + tail, "g", [x], [y], [minus1])
    folded = numpy_helper.from_array(np.array([4 if wrong else 2, -1], np.int64), "shape")
    after = helper.make_graph(tail, "g", [x], [y], [folded])
    opsets = [helper.make_opsetid("", 17)]
    return (helper.make_model(before, opset_imports=opsets, ir_version=9),
            helper.make_model(after, opset_imports=opsets, ir_version=9))


def test_a_folded_shape_is_checked_against_what_the_original_computes():
    before, after = _folded(wrong=False)
    proof = prove_graph(before, after, {}, set(), 0, kept={})
    assert proof.passed and proof.scope["checks"] == 1 and proof.scope["outputs_compared"] == []
    assert proof.scope["nodes_run"] == [2, 0]  # the original's Shape and Concat, to check the folding
    before, after = _folded(wrong=True)
    proof = prove_graph(before, after, {}, set(), 0, kept={})
    assert not proof.passed and proof.scope["whole_graph"] is True
    assert "folded constant 'shape' is not bit for bit what the original computes" in proof.scope["why"]


def test_a_region_that_cannot_be_isolated_runs_both_whole_graphs_and_says_why():
    model = _deep()
    narrowed = onnx.ModelProto()
    narrowed.CopyFrom(model)
    narrowed.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    narrowed.graph.node.insert(0, helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT))
    narrowed.graph.node[1].input[0] = "x32"
    proof = prove_graph(narrowed, model, {}, set(), 0, kept={})
    assert proof.passed and proof.scope["whole_graph"] is True and proof.scope["why"] == "the graph's inputs changed"
    assert proof.scope["nodes_run"] == [len(narrowed.graph.node), len(model.graph.node)]
    assert {s.name for s in proof.stats} == {"y", "feat"}
