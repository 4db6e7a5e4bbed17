"""--plugin-map: a custom NMS op mapped to EfficientNMS_TRT, and every validation error naming node and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import UsageError
from trtconv.rewrites import RewriteSettings, load_plugin_map, parse_plugin_map, rewrite

F = TensorProto.FLOAT

NMS_MAP = """
version: 1
ops:
  - op_type: MyNMS
    domain: custom
    plugin: {name: EfficientNMS_TRT, version: "1", namespace: ""}
    inputs: [1, 0]          # EfficientNMS_TRT wants boxes, scores; MyNMS takes scores, boxes
    attributes:
      score_threshold: {from: score_thr, type: float}
      iou_threshold: {from: iou_thr, type: float, default: 0.45}
      max_output_boxes: {from: max_num, type: int}
      background_class: {value: -1, type: int}
      score_activation: {value: 0, type: int}
      class_agnostic: {value: 0, type: int}
      box_coding: {value: 0, type: int}
"""


def nms_model(**attrs) -> onnx.ModelProto:
    a = {"score_thr": 0.25, "max_num": 100, "extra": 3}
    a.update(attrs)
    a = {k: v for k, v in a.items() if v is not None}
    pre = helper.make_node("Sigmoid", ["logits"], ["scores"], name="sig")
    nms = helper.make_node("MyNMS", ["scores", "boxes"], ["num", "det_boxes", "det_scores", "det_classes"],
                           name="nms0", domain="custom", **a)
    outs = [helper.make_tensor_value_info("num", TensorProto.INT32, [1, 1]),
            helper.make_tensor_value_info("det_boxes", F, [1, 100, 4]),
            helper.make_tensor_value_info("det_scores", F, [1, 100]),
            helper.make_tensor_value_info("det_classes", TensorProto.INT32, [1, 100])]
    g = helper.make_graph([pre, nms], "g", [helper.make_tensor_value_info("logits", F, [1, 50, 3]),
                                            helper.make_tensor_value_info("boxes", F, [1, 50, 4])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                             ir_version=8)


@pytest.fixture
def nms_map(tmp_path: Path):
    p = tmp_path / "map.yaml"
    p.write_text(NMS_MAP)
    return load_plugin_map(p)


def _attrs(n):
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def test_custom_nms_becomes_efficientnms_plugin_node(nms_map):
    res = rewrite(nms_model(), RewriteSettings(plugin_map=nms_map))
    plug = next(n for n in res.model.graph.node if n.op_type == "EfficientNMS_TRT")
    assert plug.domain == "trt.plugins"
    assert list(plug.input) == ["boxes", "scores"]
    assert list(plug.output) == ["num", "det_boxes", "det_scores", "det_classes"]
    a = _attrs(plug)
    assert a["plugin_version"] == b"1" and a["plugin_namespace"] == b""
    assert a["score_threshold"] == pytest.approx(0.25) and a["iou_threshold"] == pytest.approx(0.45)
    assert a["max_output_boxes"] == 100 and a["background_class"] == -1 and a["box_coding"] == 0
    assert "extra" not in a
    kinds = {x.name: x.type for x in plug.attribute}
    assert kinds["score_threshold"] == onnx.AttributeProto.FLOAT and kinds["max_output_boxes"] == onnx.AttributeProto.INT
    entry = res.report.rewrites[0]
    assert entry.rule == "plugin-map" and entry.target == "EfficientNMS_TRT v1"
    assert entry.proof.method == "none" and "no CPU implementation" in entry.proof.reason
    assert entry.notes == ("attributes not mapped (dropped): extra",)
    assert {o.domain for o in res.model.opset_import} == {"", "trt.plugins"}  # custom import pruned


def test_plugin_map_can_also_take_dcn(tmp_path):
    """The map wins over the built-in rules (a user may have their own DCN plugin)."""
    doc = {"version": 1, "ops": [{"op_type": "DCNv2", "plugin": {"name": "MyDCN", "version": 3},
                                  "attributes": {"stride": {"from": "stride", "type": "ints"}}}]}
    node = helper.make_node("DCNv2", ["x", "o", "m", "w"], ["y"], name="d", stride=[1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, F, [1]) for n in "xomw"],
                          [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    res = rewrite(model, RewriteSettings(plugin_map=parse_plugin_map(doc)))
    assert res.model.graph.node[0].op_type == "MyDCN"
    assert _attrs(res.model.graph.node[0])["plugin_version"] == b"3"


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("version"), "version"),
    (lambda d: d["ops"][0].pop("plugin"), "ops[0].plugin"),
    (lambda d: d["ops"][0]["plugin"].pop("name"), "ops[0].plugin.name"),
    (lambda d: d["ops"][0]["plugin"].pop("version"), "ops[0].plugin.version"),
    (lambda d: d["ops"][0].update(op_typ="x"), "ops[0].op_typ"),
    (lambda d: d["ops"][0]["attributes"]["box_coding"].update(type="int64"), "ops[0].attributes.box_coding.type"),
    (lambda d: d["ops"][0]["attributes"]["box_coding"].update(value="zero"), "ops[0].attributes.box_coding.value"),
    (lambda d: d["ops"][0]["attributes"]["box_coding"].update({"from": "a"}), "ops[0].attributes.box_coding"),
    (lambda d: d["ops"][0]["attributes"]["box_coding"].update(value=2**40), "ops[0].attributes.box_coding.value"),
    (lambda d: d["ops"][0].update(inputs=[0, -1]), "ops[0].inputs"),
    (lambda d: d["ops"].append(dict(d["ops"][0])), "ops[1].op_type"),
])
def test_map_file_errors_name_the_field(mutate, field):
    import yaml

    doc = yaml.safe_load(NMS_MAP)
    mutate(doc)
    with pytest.raises(UsageError) as err:
        parse_plugin_map(doc, "map.yaml")
    assert f"map.yaml: {field}" in err.value.message


def test_node_errors_name_the_node_and_the_field(nms_map):
    with pytest.raises(UsageError) as err:
        rewrite(nms_model(max_num=None), RewriteSettings(plugin_map=nms_map))
    msg = err.value.message
    assert "node 'nms0'" in msg and "attributes.max_output_boxes" in msg and "'max_num'" in msg
    with pytest.raises(UsageError, match=r"node 'nms0'.*attributes.score_threshold.*not a number"):
        rewrite(nms_model(score_thr="high"), RewriteSettings(plugin_map=nms_map))
    bad_index = parse_plugin_map({"version": 1, "ops": [{"op_type": "MyNMS", "domain": "custom",
                                                         "plugin": {"name": "P", "version": "1"},
                                                         "inputs": [0, 5]}]})
    with pytest.raises(UsageError, match=r"node 'nms0'.*inputs: index 5 out of range"):
        rewrite(nms_model(), RewriteSettings(plugin_map=bad_index))


def test_validation_happens_before_any_node_is_built(nms_map):
    """Two mapped nodes, the second bad: the error comes before the first is rewritten (nothing half-done)."""
    model = nms_model()
    second = onnx.NodeProto()
    second.CopyFrom(model.graph.node[1])
    second.name = "nms1"
    del second.output[:]
    second.output.extend(["n1", "b1", "s1", "c1"])
    del second.attribute[1]  # drop 'max_num' (attributes are sorted: extra, max_num, score_thr)
    model.graph.node.append(second)
    model.graph.output.append(helper.make_tensor_value_info("n1", TensorProto.INT32, [1, 1]))
    original = model.SerializeToString()
    with pytest.raises(UsageError, match="node 'nms1'"):
        rewrite(model, RewriteSettings(plugin_map=nms_map))
    assert model.SerializeToString() == original


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(UsageError, match="cannot read plugin map"):
        load_plugin_map(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [1\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_plugin_map(bad)


def test_docs_example_map_is_valid():
    """The example in docs/rewrite.md parses and maps the documented node."""
    import re

    text = (Path(__file__).parents[2] / "docs" / "rewrite.md").read_text()
    block = re.search(r"```yaml\n(version: 1\n.*?)```", text, re.S)
    assert block, "docs/rewrite.md lost its example plugin map"
    import yaml

    pmap = parse_plugin_map(yaml.safe_load(block.group(1)), "docs")
    assert pmap.lookup("custom", "MyNMS") is not None
    res = rewrite(nms_model(), RewriteSettings(plugin_map=pmap))
    assert any(n.op_type == "EfficientNMS_TRT" for n in res.model.graph.node)


def test_int_attribute_from_a_float_source_is_rejected_unless_integral(nms_map):
    res = rewrite(nms_model(max_num=100), RewriteSettings(plugin_map=nms_map))
    assert _attrs(next(n for n in res.model.graph.node if n.op_type == "EfficientNMS_TRT"))["max_output_boxes"] == 100
    with pytest.raises(UsageError, match="max_output_boxes.*not an integer"):
        rewrite(nms_model(max_num=2.5), RewriteSettings(plugin_map=nms_map))
    _ = numpy_helper  # keep import used for readers extending these tests
    assert np.int32(1) == 1


def test_unmapped_source_output_that_is_a_graph_output_is_an_error():
    pmap = parse_plugin_map({"version": 1, "ops": [{"op_type": "MyNMS", "domain": "custom",
                                                    "plugin": {"name": "P", "version": "1"}, "outputs": [0, 1, 2]}]})
    with pytest.raises(UsageError, match=r"node 'nms0'.*outputs: source output 3 \('det_classes'\)"):
        rewrite(nms_model(), RewriteSettings(plugin_map=pmap))


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe not utf-8", "DCN plugin spec .* is not UTF-8 text"),
    (b'{"plugin": ', "DCN plugin spec .* is not valid JSON"),
    (b"[" * 5000, "DCN plugin spec .* (nested too deeply|is not valid JSON)"),
])
def test_unreadable_dcn_plugin_spec_is_a_usage_error(tmp_path, content, message):
    from trtconv.rewrites import load_plugin_spec

    path = tmp_path / "spec.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        load_plugin_spec(path)
