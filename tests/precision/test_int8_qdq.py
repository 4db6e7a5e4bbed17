"""Golden Q/DQ placements on small hand-built graphs, and insertion that ONNX Runtime runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.onnxutil.walk import iter_graphs_with_path
from trtconv.precision.expose import expose_tensors
from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.qdq import Placement, insert_qdq, plan_qdq, quantize_weight
from trtconv.reference.ort import run_model
from trtconv.samples.sources import ArraySamples

RNG = np.random.default_rng(0)


def _w(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)


def _model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _resnet_block():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "wb", "bb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "r1"], ["s"], name="residual"),
        helper.make_node("Sigmoid", ["s"], ["out"], name="head"),
    ]
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "bb")
    return _model(nodes, [x], [out], [_w("wa", 4, 4, 3, 3), _w("wb", 4, 4, 3, 3), bias])


def _rows(plan):
    return sorted((p.node, p.input_index, p.tensor, p.kind, p.axis) for p in plan.placements)


def test_conv_residual_add_and_sensitive_head():
    plan = plan_qdq(_resnet_block())
    assert _rows(plan) == [
        ("conv_a", 0, "x", "activation", None),
        ("conv_a", 1, "wa", "weight", 0),
        ("conv_b", 0, "r1", "activation", None),
        ("conv_b", 1, "wb", "weight", 0),
        ("residual", 1, "r1", "activation", None),  # the skip input, so TensorRT fuses Add into conv_b
    ]
    assert [(s.node, s.reason) for s in plan.skips] == [
        ("head", "kept in floating point: sigmoid output head is numerically sensitive")]


def test_sigmoid_inside_silu_is_not_called_an_output_head():
    """MobileViT, EfficientNet, YOLOv5/8 have a Sigmoid in every SiLU (x * sigmoid(x)): the skip must not
    call each one an output head; the Sigmoid that ends the graph still is."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a"], ["sa"], name="silu_sigmoid"),
        helper.make_node("Mul", ["a", "sa"], ["act"], name="silu_mul"),
        helper.make_node("Conv", ["act", "wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["b"], ["out"], name="head"),
    ]
    plan = plan_qdq(_model(nodes, [x], [out], [_w("wa", 4, 4, 3, 3), _w("wb", 4, 4, 3, 3)]))
    assert [(s.node, s.reason) for s in plan.skips] == [
        ("silu_sigmoid", "kept in floating point: sigmoid is numerically sensitive"),
        ("head", "kept in floating point: sigmoid output head is numerically sensitive")]


def test_gemm_matmul_convtranspose_axes_and_exclusions():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
    img = helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 17])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 5, 5])
    att = helper.make_tensor_value_info("att", TensorProto.FLOAT, [2, 2])
    nodes = [
        helper.make_node("Gemm", ["x", "wg"], ["g"], name="fc_t", transB=1),  # wg: [20, 16] -> axis 0
        helper.make_node("MatMul", ["g", "wm"], ["y"], name="proj"),  # wm: [20, 17] -> axis 1
        helper.make_node("ConvTranspose", ["img", "wt"], ["z"], name="up"),  # wt: [3, 2, 2, 2] -> axis 1
        helper.make_node("Softmax", ["g"], ["p"], name="attn_softmax"),
        helper.make_node("Reshape", ["p", "shape"], ["p2"], name="reshape"),
        helper.make_node("MatMul", ["p2", "g_t"], ["att"], name="attn_v"),
        helper.make_node("Transpose", ["g"], ["g_t"], name="t"),
    ]
    nodes = nodes[:5] + [nodes[6], nodes[5]]
    shape = numpy_helper.from_array(np.array([2, 20], np.int64), "shape")
    m = _model(nodes, [x, img], [y, z, att], [_w("wg", 20, 16), _w("wm", 20, 17), _w("wt", 3, 2, 2, 2), shape])
    plan = plan_qdq(m)
    assert _rows(plan) == [
        ("fc_t", 0, "x", "activation", None),
        ("fc_t", 1, "wg", "weight", 0),
        ("proj", 0, "g", "activation", None),
        ("proj", 1, "wm", "weight", 1),
        ("up", 0, "img", "activation", None),
        ("up", 1, "wt", "weight", 1),
    ]
    reasons = {s.node: s.reason for s in plan.skips}
    assert "softmax output" in reasons["attn_v"]  # found through the Reshape
    excluded = plan_qdq(m, exclude=("fc_*", "ConvTranspose"))
    assert {p.node for p in excluded.placements} == {"proj"}
    ex = {s.node: s.reason for s in excluded.skips}
    assert ex["fc_t"] == "excluded by pattern 'fc_*'" and ex["up"] == "excluded by pattern 'ConvTranspose'"


def test_tiny_gemms_stay_in_float():
    """TensorRT's guidance: a GEMM narrower than one 16-wide tile gains nothing from INT8."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32])
    nodes = [helper.make_node("MatMul", ["x", "narrow"], ["y"], name="narrow_fc"),
             helper.make_node("MatMul", ["x", "wide"], ["z"], name="wide_fc")]
    plan = plan_qdq(_model(nodes, [x], [y, z], [_w("narrow", 16, 7), _w("wide", 16, 32)]))
    assert {p.node for p in plan.placements} == {"wide_fc"}
    assert [(s.node, s.reason) for s in plan.skips] == [
        ("narrow_fc", "tiny GEMM (16x7): INT8 gains nothing, the reformats cost")]


def test_insertion_shares_one_qdq_per_tensor_and_runs_close_to_fp32():
    m = _resnet_block()
    plan = plan_qdq(m)
    feeds = {"x": np.clip(RNG.standard_normal((1, 4, 8, 8)), -3, 3).astype(np.float32)}
    exposed, mapping = expose_tensors(m, ["r1"])
    r1 = run_model(exposed, feeds)[next(iter(mapping))]
    scales = {"x": 3.0 / 127, "r1": float(np.abs(r1).max()) / 127}
    q = insert_qdq(m, plan.placements, scales)
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("QuantizeLinear") == 2  # x and r1 (r1 shared by conv_b and the residual Add)
    assert ops.count("DequantizeLinear") == 4  # 2 activations + 2 per-channel weights
    dq_w = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("wa")]
    assert helper.get_attribute_value(dq_w[0].attribute[0]) == 0
    inits = {t.name: t for t in q.graph.initializer}
    assert "wa" not in inits and inits["wa_quantized"].data_type == TensorProto.INT8
    assert all(numpy_helper.to_array(inits[n]).item() == 0 for n in ("x_zero_point", "r1_zero_point"))
    ref, got = run_model(m, feeds)["out"], run_model(q, feeds)["out"]
    assert np.abs(ref - got).max() < 0.05


def test_weight_quantization_is_symmetric_per_channel():
    w = np.array([[[[1.0, -2.0]]], [[[0.5, 0.25]]], [[[0.0, 0.0]]]], np.float32)  # 3 output channels
    q, s = quantize_weight(w, 0)
    np.testing.assert_allclose(s, [2.0 / 127, 0.5 / 127, 1.0], rtol=1e-6)
    assert q[0].ravel().tolist() == [64, -127] and q[1].ravel().tolist() == [127, 64] and not q[2].any()


def _if_model():
    """Conv layers inside both branches of an If, weights in Constant nodes (as Silero VAD exports them)."""
    def branch(tag, k):
        w = RNG.standard_normal((2, 2, 1, 1)).astype(np.float32)
        nodes = [
            helper.make_node("Constant", [], [f"w_{tag}"], name=f"const_{tag}", value=numpy_helper.from_array(w)),
            helper.make_node("Conv", ["x", f"w_{tag}"], [f"c_{tag}"], name=f"conv_{tag}"),
            helper.make_node("Relu", [f"c_{tag}"], [f"r_{tag}"], name=f"relu_{tag}"),
            helper.make_node("Conv", [f"r_{tag}", f"w_{tag}"], [f"y_{tag}"], name=f"conv2_{tag}"),
        ]
        out = helper.make_tensor_value_info(f"y_{tag}", TensorProto.FLOAT, [1, 2, 3, 3])
        return helper.make_graph(nodes, tag, [], [out])

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])
    node = helper.make_node("If", ["flag"], ["y"], name="if", then_branch=branch("then", 1),
                            else_branch=branch("else", 2))
    return _model([node], [x, flag], [y], [])


def test_if_subgraph_calibration_outputs_and_qdq():
    m = _if_model()
    plan = plan_qdq(m)
    assert {(p.graph, p.node) for p in plan.placements} == {
        ("main/if/then_branch", "conv_then"), ("main/if/then_branch", "conv2_then"),
        ("main/if/else_branch", "conv_else"), ("main/if/else_branch", "conv2_else")}
    exposed, mapping = expose_tensors(m, ["r_then", "r_else"])
    feeds = {"x": RNG.standard_normal((1, 2, 3, 3)).astype(np.float32), "flag": np.array(True)}
    outs = run_model(exposed, feeds)
    by_tensor = {mapping[k]: v for k, v in outs.items() if k in mapping}
    assert by_tensor["r_then"].shape == (1, 2, 3, 3) and by_tensor["r_else"].size == 0  # untaken branch: empty
    samples = [{"x": RNG.standard_normal((1, 2, 3, 3)).astype(np.float32), "flag": np.array(f)}
               for f in (True, False) * 4]
    res = quantize_int8(m, Int8Settings(unverified=True, method="minmax"), ArraySamples(tuple(samples[:6])),
                        eval_samples=ArraySamples(tuple(samples[6:])))
    for attr in res.model.graph.node[0].attribute:
        ops = [n.op_type for n in attr.g.node]
        assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 3, attr.name
        assert "Constant" not in ops  # the float weight was replaced by its INT8 initializer
    assert all(s.cosine > 0.99 for s in res.report.accuracy)


def test_qdq_lands_in_the_main_graph_and_in_its_bodies_at_once(silero):
    """Silero VAD keeps its network in If bodies: one Q/DQ in the main graph must not cost the bodies theirs."""
    m = onnx.load(silero)
    plan = plan_qdq(m)
    per_graph = {g: sum(p.graph == g for p in plan.placements) for g in {p.graph for p in plan.placements}}
    assert per_graph and "main" not in per_graph
    ident = next(n for n in m.graph.node if n.op_type == "Identity")
    extra = Placement("main", ident.name, "Identity", 0, ident.input[0], "activation", "a main-graph tensor")
    scales = dict.fromkeys([*plan.activation_tensors(), ident.input[0]], 0.05)
    q = insert_qdq(m, (*plan.placements, extra), scales)
    dq = {path: sum(n.op_type == "DequantizeLinear" for n in g.node) for path, g in iter_graphs_with_path(q.graph)}
    assert dq["main"] == 1
    for path, count in per_graph.items():
        assert 0 < dq[path] <= count, path  # weights shared by several placements share one DQ


def test_branch_never_taken_is_reported_not_quantized():
    m = _if_model()
    samples = [{"x": RNG.standard_normal((1, 2, 3, 3)).astype(np.float32), "flag": np.array(True)}
               for _ in range(3)]
    res = quantize_int8(m, Int8Settings(unverified=True, method="minmax"), ArraySamples(tuple(samples)))
    skipped = {s.node: s.reason for s in res.report.skipped}
    assert "branch never taken" in skipped["conv2_else"]
    assert {p.node for p in res.report.placed} == {"conv_then", "conv2_then", "conv_else"}  # x is fed


@pytest.mark.parametrize("method", ["entropy", "percentile", "minmax"])
def test_every_method_produces_a_valid_model(method):
    m = _resnet_block()
    samples = tuple({"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(4))
    res = quantize_int8(m, Int8Settings(unverified=True, method=method), ArraySamples(samples))
    onnx.checker.check_model(res.model)
    assert res.report.method == method and set(res.report.scales) == {"x", "r1"}


def test_loop_body_is_calibrated_through_scan_outputs_and_quantized():
    """A MatMul on a loop-carried value: measured per iteration, quantized inside the body."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 16)).astype(np.float32) * 0.25
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("MatMul", ["v", "w_body"], ["mm"], name="body_mm"),
            helper.make_node("Tanh", ["mm"], ["v_next"], name="body_tanh"),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_next", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(w, "w_body")],
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    m = _model([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)], [x], [y],
               [trip, cond])
    samples = tuple({"x": rng.uniform(-1, 1, (1, 16)).astype(np.float32)} for _ in range(16))
    res = quantize_int8(m, Int8Settings(unverified=True, method="minmax"), ArraySamples(samples[:12]),
                        eval_samples=ArraySamples(samples[12:]))
    assert [(p.graph, p.node, p.tensor, p.kind) for p in res.report.placed] == [
        ("main/loop/body", "body_mm", "v", "activation"), ("main/loop/body", "body_mm", "w_body", "weight")]
    body_ops = [n.op_type for n in res.model.graph.node[0].attribute[0].g.node]
    assert body_ops.count("QuantizeLinear") == 1 and body_ops.count("DequantizeLinear") == 2
    assert res.report.accuracy[0].cosine > 0.995


def test_exposing_a_branch_output_keeps_the_if_result():
    """Regression: a value that already is an If-branch output used to be listed twice in
    the branch's outputs, and ONNX Runtime then mis-wired the If (the model's result changed)."""
    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 4])

    w = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t1"]), helper.make_node("Tanh", ["t1"], ["t_out"])],
        "then", [], [vi("t_out")])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(np.full((4,), 0.25, np.float32))),
         helper.make_node("Add", ["x", "b"], ["e_out"])],
        "else", [], [vi("e_out")])
    g = helper.make_graph(
        [helper.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Sigmoid", ["z"], ["y"])],
        "g", [vi("x"), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], [vi("y")],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    exposed, mapping = expose_tensors(m, ["e_out", "t_out"])
    assert sorted(mapping.values()) == ["e_out", "t_out"]
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        ref = run_model(m, feeds)
        got = run_model(exposed, feeds)
        np.testing.assert_array_equal(got["y"], ref["y"])
        branch_out = "t_out" if cond else "e_out"
        name = next(k for k, v in mapping.items() if v == branch_out)
        assert got[name].shape == (2, 4)


def test_half_scales_are_float16_exact_and_positive():
    """TensorRT refuses a zero scale; a dead channel's FP32 scale (1e-40) would be 0 in float16."""
    from trtconv.precision.int8.qdq import half_exact

    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32) * np.float32(0.01)
    w[1] = 1e-38  # a dead channel
    q, scale = quantize_weight(w, 0, half=True)
    assert (scale > 0).all() and np.array_equal(scale.astype(np.float16).astype(np.float32), scale)
    assert (np.abs(q[[0, 2]]).max(axis=(1, 2, 3)) == 127).all()  # rounded up: no channel clips
    deq = q.astype(np.float32) * scale.reshape(-1, 1, 1, 1)
    assert np.abs(deq[[0, 2]] - w[[0, 2]]).max() <= scale[[0, 2]].max() / 2 + 1e-9
    assert half_exact(np.float32(0.1)) >= np.float32(0.1) and half_exact(0.0) == np.float32(2.0**-24)
