"""A Loop that grows a carried tensor by Concat (torchvision's Mask/Keypoint R-CNN post-processing)
becomes a scan output and a Reshape (trtconv/rewrites/detection/loop_concat.py): same values on ONNX
Runtime, zero trips included; TensorRT-RTX's builder refuses the original and builds the rewrite."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.load import save_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, rewrite

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None


def grown_loop(casts: bool = True, extra_reader: bool = False, start: str = "constant") -> onnx.ModelProto:
    """``out`` = Concat over i < n of [i * v + i] (rows of 3), grown in a carried tensor that
    starts as an empty [0, 3]; ``casts``: float->float Casts around the Concat as torch exports them."""
    f = TensorProto.FLOAT
    body_nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=f),
        helper.make_node("Mul", ["i_f", "v"], ["scaled"]),  # v: an outer-scope value
        helper.make_node("Add", ["scaled", "i_f"], ["row"]),
        helper.make_node("Unsqueeze", ["row", "axis0"], ["item"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    if casts:
        body_nodes += [helper.make_node("Cast", ["acc_in"], ["acc_cast"], to=f),
                       helper.make_node("Concat", ["acc_cast", "item"], ["acc_cat"], axis=0),
                       helper.make_node("Cast", ["acc_cat"], ["acc_out"], to=f)]
    else:
        body_nodes.append(helper.make_node("Concat", ["acc_in", "item"], ["acc_out"], axis=0))
    outs = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", f, ["k", 3])]
    if extra_reader:  # the grown value is also read in the body: not a pure append, left alone
        body_nodes.append(helper.make_node("ReduceSum", ["acc_out"], ["seen"], keepdims=0))
        outs.append(helper.make_tensor_value_info("seen", f, None))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", f, ["k", 3])], outs,
        initializer=[numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    if start == "constant":
        first = helper.make_node("Constant", [], ["acc0"], value=numpy_helper.from_array(np.zeros((0, 3), np.float32)))
    else:
        first = helper.make_node("ConstantOfShape", ["acc_shape"], ["acc0"],
                                 value=numpy_helper.from_array(np.array([0], np.float32)))
    loop_outs = ["out", "seen_all"] if extra_reader else ["out"]
    nodes = [first, helper.make_node("Loop", ["n", "true", "acc0"], loop_outs, body=body, name="loop")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                       helper.make_tensor_value_info("v", f, [3])],
                          [helper.make_tensor_value_info("out", f, None)],
                          initializer=[numpy_helper.from_array(np.array(True), "true"),
                                       numpy_helper.from_array(np.array([0, 3], np.int64), "acc_shape")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("casts, start", [(True, "constant"), (False, "constant"), (True, "constant_of_shape")])
def test_grown_loop_becomes_a_scan_output_with_the_same_values(casts, start):
    model = grown_loop(casts, start=start)
    res = rewrite(model, RewriteSettings(target="rtx"))
    (e,) = res.report.rewrites
    assert e.rule == "loop-concat-scan" and e.proof.passed
    assert res.report.graph_proof.passed and res.report.graph_proof.method == "onnxruntime"
    loop = next(n for n in res.model.graph.node if n.op_type == "Loop")
    assert len(loop.input) == 2 and "Concat" not in {n.op_type for n in loop.attribute[0].g.node}
    v = np.array([1.5, -2.0, 0.25], np.float32)
    for n in (0, 1, 4):  # zero trips keep the [0, 3] shape
        feeds = {"n": np.array(n, np.int64), "v": v}
        ref, got = run_model(model, feeds)["out"], run_model(res.model, feeds)["out"]
        assert ref.shape == got.shape == (n, 3)
        np.testing.assert_array_equal(got, ref)


def test_every_target_gets_it_and_a_loop_that_reads_its_grown_value_is_left_alone():
    for target in ("rtx", "10.16", None):
        assert [e.rule for e in rewrite(grown_loop(), RewriteSettings(target=target)).report.rewrites] == \
            ["loop-concat-scan"]
    assert rewrite(grown_loop(extra_reader=True), RewriteSettings(target="rtx")).report.rewrites == ()


@pytest.mark.skipif(not HAVE_RTX, reason="tensorrt_rtx is not installed")
def test_rtx_builder_refuses_the_grown_loop_and_builds_the_scan(tmp_path):
    from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

    trt = import_tensorrt(RTX_MODULE)
    model = grown_loop()
    for name, m in (("orig", model), ("rewritten", rewrite(model, RewriteSettings(target="rtx")).model)):
        save_model(m, tmp_path / f"{name}.onnx")
    orig = parse_and_build(tmp_path / "orig.onnx", trt, values={"n": [4]})
    assert orig.parsed and not orig.built and "IRecurrenceLayer" in " ".join(orig.build_errors)
    assert parse_and_build(tmp_path / "rewritten.onnx", trt, values={"n": [4]}).built
