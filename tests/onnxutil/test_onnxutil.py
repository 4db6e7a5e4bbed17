"""The shared ONNX helpers, on real models: Silero VAD (If/Loop bodies) and PP-OCR det."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtconv.onnxutil.domains import (
    default_opset,
    display_domain,
    is_default_domain,
    normalize_domain,
    qualified_op,
)
from trtconv.onnxutil.graph import GraphView, cleanup, constant_tensor
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


def test_cleanup_drops_what_nothing_reads_and_keeps_the_rest(ocr_det):
    model = onnx.load(ocr_det)
    before_inits = {t.name for t in model.graph.initializer}
    before_nodes = [n.name for n in model.graph.node]
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "orphan"))
    g.node.append(helper.make_node("Constant", [], ["orphan_c"], value=numpy_helper.from_array(np.ones(2, np.float32))))
    # a node that computes what nothing reads stays (a probe's shadow is read once exposed), and is sorted
    first = g.node[0].output[0]
    g.node.insert(0, helper.make_node("Relu", [first], ["unread"], name="unread_relu"))
    # an overridable default (an initializer that is also a graph input) stays though nothing reads it
    g.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), "default_in"))
    g.input.append(helper.make_tensor_value_info("default_in", onnx.TensorProto.FLOAT, [1]))
    view = GraphView(model)
    assert view.constant("default_in") is not None and view.constant("default_in", overridable=False) is None
    assert view.constant("orphan", overridable=False) is g.initializer[len(before_inits)]
    cleanup(model)
    assert {t.name for t in g.initializer} == before_inits | {"default_in"}
    names = [n.name for n in g.node]
    assert names == before_nodes[:1] + ["unread_relu"] + before_nodes[1:]  # sorted, the file's order kept


def test_cleanup_sorts_and_keeps_subgraph_reads(silero):
    model = onnx.load(silero)
    inits = {t.name for sub in iter_graphs(model.graph) for t in sub.initializer}
    count = sum(len(sub.node) for sub in iter_graphs(model.graph))
    nodes = list(model.graph.node)
    nodes.reverse()
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    cleanup(model)
    assert is_sorted(model)
    # everything the If/Loop bodies read from outer scopes stays
    assert {t.name for sub in iter_graphs(model.graph) for t in sub.initializer} == inits
    assert sum(len(sub.node) for sub in iter_graphs(model.graph)) == count


def test_graph_view_answers_from_the_proto_subgraphs_included(silero, ocr_det):
    model = onnx.load(silero)
    view = GraphView(model)
    assert [p for p, _ in view.graphs] == [p for p, _ in iter_graphs_with_path(model.graph)]
    sites = []
    for path, g in iter_graphs_with_path(model.graph):
        for i, node in enumerate(g.node):
            site = view.producer(node.output[0])
            assert (site.path, site.graph, site.index, site.node) == (path, g, i, node)
            assert all(view.producer(o) is site for o in node.output if o)
            sites.append(site)
    # a name read inside a body but produced outside it: ONNX names are model-wide
    captured = next(s for s in sites[len(model.graph.node):] for i in s.node.input
                    if (p := view.producer(i)) is not None and p.graph is not s.graph)
    assert captured.path != "main"
    for name in {i for s in sites for i in s.node.input if i}:
        readers = [s for s in sites for i in s.node.input if i == name]
        assert list(view.readers(name)) == readers
        assert view.uses(name) == len(readers) + sum(o.name == name for _, g in view.graphs for o in g.output)
    det = onnx.load(ocr_det)
    dview = GraphView(det)
    conv = next(n for n in det.graph.node if n.op_type == "Conv")
    weight_node = next(n for n in det.graph.node if conv.input[1] in n.output)  # PP-OCR keeps weights in Constants
    assert weight_node.op_type == "Constant" and dview.producer(conv.input[1]).node is weight_node
    weight = constant_tensor(weight_node)
    assert dview.constant(conv.input[1]) is weight and weight is weight_node.attribute[0].t
    np.testing.assert_array_equal(dview.value(conv.input[1]), numpy_helper.to_array(weight))
    assert dview.constant(conv.input[0]) is None and dview.producer(conv.output[0]).node is conv
    assert dview.producer_op(conv.output[0]) == "Conv"
    reshape = next((n for n in det.graph.node if n.op_type in ("Reshape", "Transpose")), None)
    if reshape is not None:
        assert dview.producer_op(reshape.output[0], through=("Reshape", "Transpose")) == dview.producer_op(
            reshape.input[0], through=("Reshape", "Transpose"))


def test_one_default_domain_two_spellings():
    assert normalize_domain("ai.onnx") == normalize_domain("") == normalize_domain(None) == ""
    assert is_default_domain("ai.onnx") and not is_default_domain("com.microsoft")
    assert display_domain("") == "ai.onnx" and qualified_op("ai.onnx", "Conv") == "Conv"
    assert qualified_op("mmcv", "MMCVModulatedDeformConv2d") == "mmcv::MMCVModulatedDeformConv2d"
    m = helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("ai.onnx", 17)])
    assert default_opset(m) == 17
