"""Removing constants nothing reads: what a pass leaves behind after it replaced weights."""

from __future__ import annotations

import onnx

from trtconv.onnxutil.walk import iter_graphs


def read_names(model: onnx.ModelProto) -> set[str]:
    """Every name some node reads, or a graph returns, in any graph (subgraphs read outer names too)."""
    used: set[str] = set()
    for g in iter_graphs(model.graph):
        for n in g.node:
            used.update(n.input)
        used.update(o.name for o in g.output)
    return used


def remove_unused_constants(model: onnx.ModelProto) -> None:
    """Drop, in place, initializers and Constant nodes nothing reads. An initializer that is
    also a graph input (an overridable default) stays. One pass is enough: constants read nothing."""
    used = read_names(model)
    for g in iter_graphs(model.graph):
        inputs = {i.name for i in g.input}
        # Deleted by index, in place: clearing and re-adding the rest would copy every weight.
        for i in reversed(range(len(g.initializer))):
            if g.initializer[i].name not in used and g.initializer[i].name not in inputs:
                del g.initializer[i]
        for i in reversed(range(len(g.node))):
            n = g.node[i]
            if n.op_type == "Constant" and not any(o in used for o in n.output):
                del g.node[i]
