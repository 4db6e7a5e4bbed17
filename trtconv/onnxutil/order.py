"""Topological order: the one sort trtconv writes itself (onnx-graphsurgeon's ``Graph.toposort``
sorts the graphs the rewrite stage edits)."""

from __future__ import annotations

import heapq

import onnx

from trtconv.errors import InvalidModelError
from trtconv.onnxutil.walk import iter_graphs, subgraphs


def topological_order(g: onnx.GraphProto) -> tuple[list[int], int | None]:
    """Node indices of ``g`` producers-first (stable: ties keep file order, so equal
    inputs give equal outputs), and the index of a node on a cycle, or None.

    Names from outer scopes (subgraph captures) and graph inputs count as sources.
    Loading, sorting and analysis all use it.
    """
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    users: dict[int, list[int]] = {}
    indegree = [0] * len(g.node)
    for i, n in enumerate(g.node):
        for j in {producer[x] for x in n.input if x in producer}:
            indegree[i] += 1
            users.setdefault(j, []).append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        j = heapq.heappop(ready)
        order.append(j)
        for i in users.get(j, ()):
            indegree[i] -= 1
            if indegree[i] == 0:
                heapq.heappush(ready, i)
    stuck = None if len(order) == len(g.node) else next(i for i, d in enumerate(indegree) if d > 0)
    return order, stuck


def sort_nodes(model: onnx.ModelProto) -> bool:
    """Put every graph's nodes in topological order, in place. True if anything moved.
    ONNX wants sorted graphs and passes that walk producers before consumers rely on it;
    ONNX Runtime and TensorRT's parser accept unsorted ones, so some exporters write them."""
    moved = False
    for g in iter_graphs(model.graph):
        order, stuck = topological_order(g)
        if stuck is not None:
            raise InvalidModelError("the graph has a cycle", hint="the model file is corrupt; re-export it")
        if order != sorted(order):
            nodes = [onnx.NodeProto() for _ in order]
            for dst, i in zip(nodes, order):
                dst.CopyFrom(g.node[i])
            del g.node[:]
            g.node.extend(nodes)
            moved = True
    return moved


def is_sorted(model: onnx.ModelProto) -> bool:
    """True if every node's inputs are known before it (in every subgraph, outer names included):
    a check, stricter than :func:`topological_order` (a name nothing defines also fails it)."""

    def check(g: onnx.GraphProto, outer: set[str]) -> bool:
        known = set(outer) | {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
        for n in g.node:
            if any(i not in known for i in n.input):
                return False
            if any(not check(sub, known) for _, sub in subgraphs(n)):
                return False
            known.update(n.output)
        return True

    return check(model.graph, set())
