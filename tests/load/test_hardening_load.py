"""The loader's structural checks, one broken model each: every command reads models
through trtconv.load, so each refusal here is a traceback the fuzzer found downstream."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from trtconv.errors import InvalidModelError
from trtconv.load import load_model


def _base() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((1, 3, 3, 3), np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _nest(m: onnx.ModelProto, depth: int) -> None:
    inner = onnx.NodeProto()
    inner.CopyFrom(m.graph.node[1])
    m.graph.initializer.append(helper.make_tensor("cond", TensorProto.BOOL, [], [True]))
    leaf = onnx.GraphProto(name="leaf", node=[inner], output=[helper.make_tensor_value_info("y", 1, None)])
    cur = m.graph.node[1]
    cur.Clear()
    for level in range(depth):
        cur.op_type, cur.name = "If", f"if{level}"
        cur.input.append("cond")
        cur.output.append("y")
        then = cur.attribute.add(name="then_branch", type=AttributeProto.GRAPH)
        then.g.output.append(helper.make_tensor_value_info("y", 1, None))
        cur.attribute.add(name="else_branch", type=AttributeProto.GRAPH).g.CopyFrom(leaf)
        cur = then.g.node.add()
    cur.CopyFrom(inner)


def _break(kind: str, m: onnx.ModelProto) -> None:
    g = m.graph
    if kind == "no-opset":
        del m.opset_import[:]
    elif kind == "opset-2**40":
        m.opset_import[0].version = 2**40
    elif kind == "ir-1":
        m.ir_version = 1
    elif kind == "no-outputs":
        del g.output[:]
    elif kind == "input-without-type":
        g.input[0].ClearField("type")
    elif kind == "output-type-99":
        g.output[0].type.tensor_type.elem_type = 99
    elif kind == "input-dim-2**40":
        g.input[0].type.tensor_type.shape.dim[0].dim_value = 2**40
    elif kind == "duplicate-output":
        g.node[1].output[0] = "c"
    elif kind == "duplicate-initializer":
        g.initializer.append(g.initializer[0])
    elif kind == "cycle":
        g.node[0].input[0] = "y"
    elif kind == "attribute-wrong-type":
        a = g.node[0].attribute[0]
        a.type, a.s = AttributeProto.STRING, b"3x3"
        del a.ints[:]
    elif kind == "attribute-unknown":
        g.node[1].attribute.append(helper.make_attribute("alpha", 0.1))
    elif kind == "cast-to-0":
        g.node.append(helper.make_node("Cast", ["y"], ["z"], name="cast", to=0))
        g.output[0].name = "z"
    elif kind == "attribute-no-type":
        g.node[0].attribute[0].type = AttributeProto.UNDEFINED
    elif kind == "weight-short":
        g.initializer[0].raw_data = g.initializer[0].raw_data[:-4]
    elif kind == "weight-dtype":
        g.initializer[0].data_type = TensorProto.INT8
    elif kind == "weight-dims-2**40":
        g.initializer[0].dims[0] = 2**40
    elif kind == "name-not-utf8":
        g.node[0].name = "conv"
        data = m.SerializeToString().replace(b"conv", b"c\xffnv", 1)
        m.Clear()
        m.ParseFromString(data)
    elif kind == "nested-20":
        _nest(m, 20)
    else:
        raise ValueError(kind)


EXPECT = {
    "no-opset": "imports no opset", "opset-2**40": "cannot exist", "ir-1": "IR version 1",
    "no-outputs": "no outputs", "input-without-type": "has no type", "output-type-99": "unknown element type 99",
    "input-dim-2**40": "1099511627776", "duplicate-output": "already exists",
    "duplicate-initializer": "two initializers named 'W'", "cycle": "cycle",
    "attribute-wrong-type": "kernel_shape", "attribute-unknown": "no attribute 'alpha'",
    "attribute-no-type": "invalid type", "cast-to-0": "is not an ONNX data type", "weight-short": "carries 104 bytes", "weight-dtype": "INT8",
    "weight-dims-2**40": "1099511627776", "name-not-utf8": "not valid UTF-8", "nested-20": "nest 20 levels",
}


@pytest.mark.parametrize("kind", sorted(EXPECT))
def test_broken_model_is_refused_fast_with_a_reason(tmp_path, kind):
    m = _base()
    _break(kind, m)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    start = time.monotonic()
    with pytest.raises(InvalidModelError) as info:
        load_model(path)
    assert time.monotonic() - start < 2
    assert EXPECT[kind] in info.value.message, info.value.message


def test_the_unbroken_base_and_real_models_load(tmp_path, ocr_det, ocr_rec, ocr_cls, silero):
    path = tmp_path / "m.onnx"
    path.write_bytes(_base().SerializeToString())
    assert load_model(path).checker_error is None
    m = _base()
    _nest(m, 8)  # deep, but within the limit
    path.write_bytes(m.SerializeToString())
    load_model(path)
    for real in (ocr_det, ocr_rec, ocr_cls, silero):
        load_model(real)


def test_sort_nodes_orders_an_unsorted_graph_stably(tmp_path, ocr_cls):
    from trtconv.onnxutil.order import is_sorted, sort_nodes

    m = load_model(ocr_cls).proto
    want = [n.name for n in m.graph.node]
    assert not sort_nodes(m)  # already sorted: nothing moves
    nodes = list(m.graph.node)
    shuffled = nodes[100:] + nodes[:100]
    del m.graph.node[:]
    m.graph.node.extend(shuffled)
    assert not is_sorted(m)
    assert sort_nodes(m) and is_sorted(m)
    assert sorted(n.name for n in m.graph.node) == sorted(want)
