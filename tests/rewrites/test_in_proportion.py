"""The rewrite stage works in proportion to change (issue 34): with ``rules_only`` (build's setting) a
model no rule may apply to comes back as it went in, with nothing imported, folded or proven; a model
with one site still takes the whole path; a fused-op rule runs no shape inference for a standard op."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_dtypes import uint8_image_model

from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.transformer.layernorm import LayerNormRule

BUILD = RewriteSettings(rules_only=True, target="rtx")


def _float_model() -> onnx.ModelProto:
    """float input -> Cast(float16) -> Cast(float) -> Gather on a float table -> Add of a foldable
    Shape chain: a Cast and a Gather (ops rules cover in some contexts), and something to fold."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    ids = numpy_helper.from_array(np.array([0, 2], np.int64), "ids")
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16, name="down"),
             helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT, name="up"),
             helper.make_node("Gather", ["table", "ids"], ["rows"], name="rows"),
             helper.make_node("Shape", ["rows"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT, name="shape_f"),
             helper.make_node("ReduceSum", ["sf"], ["n"], keepdims=0, name="count"),
             helper.make_node("Add", ["f", "n"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [table, ids])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_nothing_to_rewrite_is_handed_on_untouched():
    model = _float_model()
    before = model.SerializeToString()
    result = rewrite(model, BUILD)
    assert result.model is model and model.SerializeToString() == before  # no copy, no edit, no fold
    assert result.report.rewrites == () and result.report.cleanups == ()
    assert result.report.graph_proof.method == "identical" and "nothing to rewrite" in result.report.graph_proof.reason
    # `rewrite` (rules_only off) still folds the Shape chain: the clean-ups are its output
    folded = rewrite(model, RewriteSettings(target="rtx")).model
    assert "Shape" not in {n.op_type for n in folded.graph.node}


def test_one_site_takes_the_whole_path():
    model = uint8_image_model()  # a uint8 input reaching a Cast: the uint8-input-cast rule's site
    result = rewrite(model, BUILD)
    assert [e.rule for e in result.report.rewrites] == ["uint8-input-cast"]
    assert result.model is not model and result.report.graph_proof.method == "onnxruntime"


def test_shared_dim_names_still_get_their_renaming():
    model = _float_model()
    x = model.graph.input[0].type.tensor_type.shape
    for d in x.dim:
        d.dim_param = "?"  # PP-OCR cls's input: TensorRT would take H and W as one dim
    result = rewrite(model, BUILD)
    dims = [d.dim_param for d in result.model.graph.input[0].type.tensor_type.shape.dim]
    assert len(set(dims)) == 2 and [c.rule for c in result.report.cleanups] == ["rename-shared-dims"]
    assert [d.dim_param for d in x.dim] == ["?", "?"]  # on a copy: the caller's model is not edited
    assert result.report.graph_proof.method == "identical"


def test_a_standard_layernorm_runs_no_symbolic_shape_inference():
    """LayerNormRule rewrites opsets below 17; at 17 the op is standard: its prepare returns the model
    as it is (it ran ONNX Runtime's symbolic inference, importing torch: 13 s on a BERT encoder)."""
    ln = helper.make_node("LayerNormalization", ["x", "scale"], ["n"], axis=-1)  # "n": a tensor of no known shape
    g = helper.make_graph([ln, helper.make_node("Relu", ["n"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.ones(1, np.float32), "scale")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert LayerNormRule().prepare(model, BUILD, False) is model
