"""The shared ONNX helpers, on real models: Silero VAD (If/Loop bodies) and PP-OCR det."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtconv.onnxutil.constants import remove_unused_constants
from trtconv.onnxutil.domains import (
    default_opset,
    display_domain,
    is_default_domain,
    normalize_domain,
    qualified_op,
)
from trtconv.onnxutil.names import fresh_name, model_names
from trtconv.onnxutil.order import is_sorted, sort_nodes, topological_order
from trtconv.onnxutil.walk import has_subgraphs, iter_graphs, iter_graphs_with_path, subgraph_depth, subgraphs


def test_subgraphs_are_walked_once_each_with_their_path(silero):
    model = onnx.load(silero)
    paths = [p for p, _ in iter_graphs_with_path(model.graph)]
    assert paths[0] == "main" and len(paths) == len(set(paths)) > 1
    containers = [n for g in iter_graphs(model.graph) for n in g.node if has_subgraphs(n)]
    assert len(paths) == 1 + sum(len(list(subgraphs(n))) for n in containers)
    assert all("/" in p for p in paths[1:]) and subgraph_depth(model.graph) >= 1
    if_node = next(n for n in containers if n.op_type == "If")
    assert {label for label, _ in subgraphs(if_node)} == {"then_branch", "else_branch"}


def test_topological_order_sorts_a_shuffled_real_graph(ocr_det):
    model = onnx.load(ocr_det)
    order, stuck = topological_order(model.graph)
    assert stuck is None and order == list(range(len(model.graph.node)))  # exported sorted: stable
    nodes = list(model.graph.node)
    random.Random(0).shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    assert not is_sorted(model)
    assert sort_nodes(model) and is_sorted(model)
    assert not sort_nodes(model)  # sorted already: nothing moves


def test_a_cycle_is_found():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2")]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])])
    _, stuck = topological_order(g)
    assert stuck in (0, 1)


def test_fresh_names_avoid_every_name_in_the_model(ocr_det):
    model = onnx.load(ocr_det)
    taken = model_names(model)
    some = model.graph.node[0].output[0]
    first, second = fresh_name(some, taken), fresh_name(some, taken)
    assert (first, second) == (f"{some}_1", f"{some}_2") and {first, second} <= taken
    assert fresh_name("never_used_name", taken) == "never_used_name"


def test_unused_constants_go_used_ones_stay(ocr_det):
    model = onnx.load(ocr_det)
    before = {t.name for t in model.graph.initializer}
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "orphan"))
    model.graph.node.append(helper.make_node("Constant", [], ["orphan_c"], value=numpy_helper.from_array(
        np.ones(2, np.float32))))
    remove_unused_constants(model)
    assert {t.name for t in model.graph.initializer} == before
    assert "orphan_c" not in {o for n in model.graph.node for o in n.output}


def test_one_default_domain_two_spellings():
    assert normalize_domain("ai.onnx") == normalize_domain("") == normalize_domain(None) == ""
    assert is_default_domain("ai.onnx") and not is_default_domain("com.microsoft")
    assert display_domain("") == "ai.onnx" and qualified_op("ai.onnx", "Conv") == "Conv"
    assert qualified_op("mmcv", "MMCVModulatedDeformConv2d") == "mmcv::MMCVModulatedDeformConv2d"
    m = helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("ai.onnx", 17)])
    assert default_opset(m) == 17
