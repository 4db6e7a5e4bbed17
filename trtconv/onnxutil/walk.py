"""The one way trtconv walks subgraphs (If/Loop/Scan bodies), for onnx protos and for
onnx-graphsurgeon graphs alike."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_graphsurgeon as gs


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(label, body) of each graph attribute of ``node``: ``then_branch``, or ``name[i]`` in a GRAPHS list."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def has_subgraphs(node: onnx.NodeProto) -> bool:
    """True for a container node (If, Loop, Scan): one with a graph attribute."""
    return next(subgraphs(node), None) is not None


def iter_graphs_with_path(graph: onnx.GraphProto, path: str = "main") -> Iterator[tuple[str, onnx.GraphProto]]:
    """The graph and every subgraph, depth first, each with a path like ``main/If_0/then_branch``."""
    yield path, graph
    for node in graph.node:
        for label, sub in subgraphs(node):
            yield from iter_graphs_with_path(sub, f"{path}/{node.name or node.op_type}/{label}")


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    for _, g in iter_graphs_with_path(graph):
        yield g


def subgraph_depth(graph: onnx.GraphProto) -> int:
    """How many levels of subgraphs nest below ``graph`` (0: none)."""
    return max((1 + subgraph_depth(sub) for node in graph.node for _, sub in subgraphs(node)), default=0)


def gs_subgraphs(node: gs.Node) -> Iterator[gs.Graph]:
    """The onnx-graphsurgeon graphs held in ``node``'s attributes (a graph, or a list of them)."""
    for value in node.attrs.values():
        if isinstance(value, gs.Graph):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, gs.Graph))


def gs_nodes(graph: gs.Graph) -> Iterator[gs.Node]:
    """Every node of ``graph`` and of its subgraphs, each before the nodes of its own bodies."""
    for node in graph.nodes:
        yield node
        for sub in gs_subgraphs(node):
            yield from gs_nodes(sub)


def gs_all_subgraphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    """Every subgraph below ``graph`` (not ``graph`` itself)."""
    for node in gs_nodes(graph):
        yield from gs_subgraphs(node)
