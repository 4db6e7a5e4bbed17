"""Types TensorRT refuses or changes (trtconv/rewrites/dtypes/): a uint8 NHWC image input transposed
before its Cast, and float64 models, narrowed explicitly and reported. Graphs built in code; the
real TensorRT-RTX parser says what it refuses."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtconv.analyze import analyze
from trtconv.load import load_model, save_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import rewrite
from trtconv.rewrites.catalog import RULES

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None


def _rtx_parses(model: onnx.ModelProto, tmp_path, name: str) -> bool:
    from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

    path = tmp_path / f"{name}.onnx"
    save_model(model, path)
    return parse_and_build(path, import_tensorrt(RTX_MODULE), build=False).parsed


def uint8_image_model() -> onnx.ModelProto:
    """uint8 NHWC image -> Transpose -> Reshape -> Cast(float) -> /255 -> Conv: a common export."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["image"], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="same"),
             helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("Div", ["c", "d"], ["n"]), helper.make_node("Conv", ["n", "W"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 16, 16, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([1, 3, 16, 16], np.int64), "shape"),
                           numpy_helper.from_array(np.array(255, np.float32), "d"), numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def float64_model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Cast", ["m"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Cast", ["r"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Add", ["d", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 4])],
                          [numpy_helper.from_array(rng.standard_normal((8, 4)), "W"),
                           numpy_helper.from_array(rng.standard_normal((4,)), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_uint8_input_is_cast_at_the_boundary_and_keeps_its_type(tmp_path):
    model = uint8_image_model()
    res = rewrite(model)
    assert [n.op_type for n in res.model.graph.node] == ["Cast", "Transpose", "Reshape", "Div", "Conv"]
    assert res.model.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8  # the engine keeps uint8
    (e,) = res.report.rewrites
    assert (e.node, e.rule) == ("to_float", "uint8-input-cast") and e.proof.passed and e.proof.max_abs == 0
    assert res.report.graph_proof.passed and not res.report.dtype_changes
    x = np.random.default_rng(2).integers(0, 256, (1, 16, 16, 3)).astype(np.uint8)
    np.testing.assert_array_equal(run_model(res.model, {"image": x})["y"], run_model(model, {"image": x})["y"])
    kept = rewrite(model, rules=tuple(r for r in RULES if r.name != "uint8-input-cast"))
    assert [n.op_type for n in kept.model.graph.node][:3] == ["Transpose", "Reshape", "Cast"]
    if HAVE_RTX:
        assert not _rtx_parses(model, tmp_path, "orig") and _rtx_parses(res.model, tmp_path, "rewritten")


def test_check_names_the_rule_for_the_transpose_of_a_uint8_input(tmp_path):
    save_model(uint8_image_model(), tmp_path / "m.onnx")
    report = analyze(load_model(tmp_path / "m.onnx"), "rtx")
    node = next(n for n in report.nodes if n.path == "to_nchw")
    assert (node.status, node.rewrite) == ("rewritable", "uint8-input-cast")
    assert report.verdict == "needs-rewrite"


def test_float64_is_narrowed_explicitly_and_reported():
    model = float64_model()
    res = rewrite(model)
    g = res.model.graph
    assert g.input[0].type.tensor_type.elem_type == g.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert all(t.data_type == TensorProto.FLOAT for t in g.initializer)
    assert [helper.get_attribute_value(n.attribute[0]) for n in g.node if n.op_type == "Cast"] == [1, 1]
    changes = [(c.kind, c.name, c.before, c.after) for c in res.report.dtype_changes]
    assert changes == [("input", "x", "float64", "float32"), ("output", "y", "float64", "float32")]
    assert res.report.to_json()["dtype_changes"][0]["rule"] == "narrow-float64"
    assert "input 'x' changed type: float64 -> float32" in res.report.to_text()
    # proven against the float64 original, in ONNX Runtime
    assert res.report.graph_proof.method == "onnxruntime" and res.report.graph_proof.passed
    x = np.random.default_rng(3).standard_normal((2, 8))
    np.testing.assert_allclose(run_model(res.model, {"x": x.astype(np.float32)})["y"], run_model(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_a_model_without_float64_is_not_touched():
    res = rewrite(uint8_image_model())
    assert not res.report.dtype_changes and all(c.rule != "narrow-float64" for c in res.report.cleanups)
