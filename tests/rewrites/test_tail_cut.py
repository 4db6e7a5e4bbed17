"""The cut of `build --split-tail` (trtconv/rewrites/tail_cut.py): where it cuts, what crosses, that
head → tail on ONNX Runtime equals the model, and what it declines; `check`'s hint names the flag."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.analyze import analyze
from trtconv.errors import UnsupportedModelError
from trtconv.load import infer_shapes, load_model
from trtconv.reference import random_feeds, run, session
from trtconv.rewrites import cut_tail, prove_cut, tail_feeds, tail_ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tail_models import nms_model, nonzero_in_branch_model, nonzero_model  # noqa: E402

RTX_OPS = tail_ops("rtx")


def _cut(path: Path):
    loaded = load_model(path)
    return loaded, cut_tail(loaded.proto, RTX_OPS, infer_shapes(loaded, symbolic=False))


def test_only_rtx_needs_the_split():
    assert set(RTX_OPS) == {"NonZero", "NonMaxSuppression"}
    assert tail_ops("10.16") == () and tail_ops("11.4") == ()


def test_nms_graph_is_cut_at_the_nms_and_composes_exactly(tmp_path):
    loaded, cut = _cut(nms_model(tmp_path / "nms.onnx"))
    assert cut.at == ("nms (NonMaxSuppression)",)
    assert [n.name for n in cut.head.graph.node] == ["conv", "score_slice", "score_sigmoid", "score_reshape",
                                                     "score_flat"]
    # the NMS and all after it; and the box slicing that only feeds it (the cut is no wider for it)
    assert [n.name for n in cut.tail.graph.node] == ["box_slice", "box_reshape", "box_transpose", "nms",
                                                     "keep_index", "box_table", "det_boxes", "det_scores"]
    # engine outputs: the model's output it computes (names kept), then what the tail reads from it
    assert [o.name for o in cut.head.graph.output] == ["all_scores", "feat", "scores"]
    assert [c.name for c in cut.cut] == ["all_scores", "feat", "scores"]
    assert [c.shape for c in cut.cut] == [(256,), (1, 5, 16, 16), (1, 1, 256)]
    assert {c.dtype for c in cut.cut} == {"float32"} and {c.source for c in cut.cut} == {"head"}
    assert cut.head_outputs == ("all_scores",) and cut.tail_outputs == ("det_boxes", "det_scores")
    # each part carries the initializers it reads: the tail the NMS limits, the head the weights
    assert {"max_out", "iou", "score_thr", "col2", "box_rows"} <= {t.name for t in cut.tail.graph.initializer}
    assert "w" in {t.name for t in cut.head.graph.initializer} and "w" not in {t.name for t in cut.tail.graph.initializer}
    for m in (cut.head, cut.tail):
        onnx.checker.check_model(m, full_check=True)
    feeds = random_feeds(loaded.proto, seed=0)
    proof = prove_cut(loaded.proto, cut, feeds, inputs="seeded", tolerance=1e-5)
    assert proof.passed and proof.max_abs == 0.0
    assert {s.name: s.shape for s in proof.stats} == {"det_boxes": (20, 4), "det_scores": (20,), "all_scores": (256,)}


def test_per_class_slices_cross_the_cut_as_one_tensor(tmp_path):
    """A detector's per-class post-processing (slice the class's scores, threshold, NonZero): the light
    slices and masks that only feed the tail go with it, so the scores cross once, not once per class."""
    F, classes = TensorProto.FLOAT, 4
    inits = [numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, classes)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "thr")]
    inits += [numpy_helper.from_array(np.array(k, np.int64), f"k{k}") for k in range(classes)]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"], name="head_matmul")]
    for k in range(classes):
        nodes += [helper.make_node("Gather", ["scores", f"k{k}"], [f"s{k}"], name=f"class{k}", axis=2),
                  helper.make_node("Greater", [f"s{k}", "thr"], [f"m{k}"], name=f"keep{k}"),
                  helper.make_node("NonZero", [f"m{k}"], [f"i{k}"], name=f"nonzero{k}"),
                  helper.make_node("Cast", [f"i{k}"], [f"f{k}"], name=f"cast{k}", to=F),
                  helper.make_node("ReduceSum", [f"f{k}"], [f"count{k}"], name=f"count{k}", keepdims=0)]
    graph = helper.make_graph(nodes, "perclass", [helper.make_tensor_value_info("x", F, [1, 8, 4])],
                              [helper.make_tensor_value_info(f"count{k}", F, []) for k in range(classes)], inits)
    path = tmp_path / "perclass.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    loaded, cut = _cut(path)
    assert [c.name for c in cut.cut] == ["scores"] and [n.op_type for n in cut.head.graph.node] == ["MatMul"]
    assert len(cut.at) == classes
    proof = prove_cut(loaded.proto, cut, random_feeds(loaded.proto, seed=2), inputs="seeded", tolerance=1e-5)
    assert proof.passed and proof.max_abs == 0.0


def test_nonzero_graph_composes_on_onnx_runtime(tmp_path):
    loaded, cut = _cut(nonzero_model(tmp_path / "nz.onnx"))
    assert cut.at == ("nonzero (NonZero)",) and cut.head_outputs == ("doubled",)
    assert [c.name for c in cut.cut] == ["doubled", "r"] and cut.tail_outputs == ("positive",)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    head = run(session(cut.head), {"x": x})
    tail = run(session(cut.tail), tail_feeds(cut, head, {"x": x}))
    want = run(session(loaded.proto), {"x": x})
    np.testing.assert_array_equal(tail["positive"], want["positive"])
    np.testing.assert_array_equal(head["doubled"], want["doubled"])


def test_a_wrong_composition_fails_the_proof(tmp_path):
    """The proof can fail: a tail that computes something else is caught (shape or value)."""
    loaded, cut = _cut(nms_model(tmp_path / "nms.onnx"))
    broken = onnx.ModelProto()
    broken.CopyFrom(cut.tail)
    for t in broken.graph.initializer:
        if t.name == "iou":
            t.CopyFrom(numpy_helper.from_array(np.array([0.9], np.float32), "iou"))
    proof = prove_cut(loaded.proto, type(cut)(**{**cut.__dict__, "tail": broken}),
                      random_feeds(loaded.proto, seed=0), inputs="seeded", tolerance=1e-5)
    assert proof.passed is False


def test_tail_reads_a_model_input_and_a_body_reads_the_head_by_name(tmp_path):
    """A container after the cut goes to the tail whole; the head tensor its body reads by name crosses
    the cut, and a model input the tail reads is fed to it directly (no engine output)."""
    F = TensorProto.FLOAT
    body = helper.make_graph([helper.make_node("Add", ["k", "scale"], ["out"], name="add_in_then")], "then", [],
                             [helper.make_tensor_value_info("out", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["k"], ["out2"], name="id_else")], "else", [],
                              [helper.make_tensor_value_info("out2", F, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "r"], ["scale"], name="square"),  # heavy: stays in the engine
        helper.make_node("NonZero", ["r"], ["idx"], name="nz"),
        helper.make_node("Cast", ["idx"], ["k"], name="cast", to=F),
        helper.make_node("ReduceSum", ["k"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "flag"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=body, else_branch=other),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 2]),
                                           helper.make_tensor_value_info("flag", F, [])],
                              [helper.make_tensor_value_info("y", F, None)])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    loaded, cut = _cut(path)
    assert [(c.name, c.source) for c in cut.cut] == [("r", "head"), ("scale", "head"), ("flag", "input")]
    assert [i.name for i in cut.head.graph.input] == ["x"]  # the tail's own input is no engine input
    feeds = {"x": np.array([[1.0, -1.0], [2.0, 0.0]], np.float32), "flag": np.array(0.5, np.float32)}
    proof = prove_cut(loaded.proto, cut, feeds, inputs="given", tolerance=1e-5)
    assert proof.passed and proof.max_abs == 0.0


def test_a_cut_into_a_subgraph_is_declined(tmp_path):
    loaded = load_model(nonzero_in_branch_model(tmp_path / "br.onnx"))
    with pytest.raises(UnsupportedModelError, match="inside the body branch/then_branch of If node branch"):
        cut_tail(loaded.proto, RTX_OPS)


def test_no_such_node_no_cut(tmp_path):
    loaded = load_model(nms_model(tmp_path / "nms.onnx"))
    assert cut_tail(loaded.proto, ("NonZero",)) is None


@pytest.mark.parametrize("make, op", [(nms_model, "NonMaxSuppression"), (nonzero_model, "NonZero")])
def test_check_on_rtx_names_the_split_flag(tmp_path, make, op):
    path = make(tmp_path / "m.onnx")
    report = analyze(load_model(path), "rtx")
    (node,) = [n for n in report.nodes if n.op_type == op]
    assert node.status == "unsupported"
    hint = next(f.hint for f in node.findings if f.severity == "error")
    assert f"`trtconv build {path} -o {tmp_path / 'm.engine'} --trt rtx --split-tail`" in hint
    on_11 = analyze(load_model(path), "11.4")
    assert all(n.status == "supported" for n in on_11.nodes)  # native there: no split, no hint
    assert not any("--split-tail" in (f.hint or "") for n in on_11.nodes for f in n.findings)
