"""The one graph view and the one clean-up of the passes that edit ONNX protos directly
(FP16, INT8 Q/DQ, BatchNorm folding).

Why not onnx-graphsurgeon, as the rewrite stage uses: those passes work on the proto, in
node order, one scope at a time, and add or rename a few tensors next to what exists;
graphsurgeon's import and export would copy every weight unless weights are lent as
byte-less stand-ins (``rewrites/roundtrip.py``), and the FP16 typing, an algorithm over
node indices and scopes, would have to be rewritten rather than moved. What they lacked
was one shared answer to "who produces / who reads this name": each built its own map and
kept its own removal of replaced constants. Here both are written once (less code than
either port, and no copy):

- :class:`GraphView`: producers, readers and constants of every tensor name, model-wide
  (ONNX names are model-wide: a branch reads its parent's tensors by name), computed from
  the proto in one walk. It describes the model as it was when made and is never updated:
  a pass reads it, then edits, and makes a new view if it must read again.
- :func:`cleanup`: what every editing pass ends with: constants nothing reads any more go,
  then the graphs are put in topological order (:func:`~trtconv.onnxutil.order.sort_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from trtconv.onnxutil.order import sort_nodes
from trtconv.onnxutil.tensors import tensor_array
from trtconv.onnxutil.walk import iter_graphs_with_path


@dataclass(frozen=True)
class Site:
    """Where a node stands: its graph (and that graph's path, ``main/If_0/then_branch``) and index."""

    path: str
    graph: onnx.GraphProto
    index: int
    node: onnx.NodeProto


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a ``Constant`` node given as ``value`` (other forms: None)."""
    if node.op_type != "Constant" or not node.output:
        return None
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr.t
    return None


class GraphView:
    """Producers, readers and constants of every tensor name in ``model`` (subgraphs included),
    as the model stands now. Holds references into the proto, never copies of weights."""

    def __init__(self, model: onnx.ModelProto | onnx.GraphProto) -> None:
        graph = model.graph if isinstance(model, onnx.ModelProto) else model
        self.graphs: tuple[tuple[str, onnx.GraphProto], ...] = tuple(iter_graphs_with_path(graph))
        self._producer: dict[str, Site] = {}
        self._readers: dict[str, list[Site]] = {}
        self._returned: dict[str, int] = {}
        self._initializer: dict[str, onnx.TensorProto] = {}
        self._inputs: set[str] = set()
        for path, g in self.graphs:
            self._inputs.update(i.name for i in g.input)
            self._initializer.update((t.name, t) for t in g.initializer)
            for o in g.output:
                self._returned[o.name] = self._returned.get(o.name, 0) + 1
            for i, node in enumerate(g.node):
                site = Site(path, g, i, node)
                for name in node.input:
                    if name:
                        self._readers.setdefault(name, []).append(site)
                for name in node.output:
                    if name:
                        self._producer[name] = site

    def producer(self, name: str) -> Site | None:
        """The node that computes ``name`` (None: an input, an initializer, or nothing)."""
        return self._producer.get(name)

    def produced(self) -> Iterator[str]:
        """Every name some node computes."""
        return iter(self._producer)

    def readers(self, name: str) -> tuple[Site, ...]:
        """The nodes reading ``name``, once per input slot, in any graph (subgraphs read outer names)."""
        return tuple(self._readers.get(name, ()))

    def uses(self, name: str) -> int:
        """How often ``name`` is read: input slots plus the graph outputs that return it."""
        return len(self._readers.get(name, ())) + self._returned.get(name, 0)

    def producer_op(self, name: str, *, through: tuple[str, ...] = ()) -> str | None:
        """The op that computes ``name``, looking back through ``through`` ops (e.g. reshapes)."""
        site = self.producer_through(name, through=through)
        return site.node.op_type if site is not None else None

    def producer_through(self, name: str, *, through: tuple[str, ...] = ()) -> Site | None:
        """The node that computes ``name``, looking back (by first input) through ``through`` ops."""
        for _ in range(32):
            site = self._producer.get(name)
            if site is None or site.node.op_type not in through or not site.node.input:
                return site
            name = site.node.input[0]
        return None

    def constant(self, name: str, *, overridable: bool = True) -> onnx.TensorProto | None:
        """The tensor behind ``name`` if it is an initializer or a ``Constant`` node's value.
        ``overridable=False`` leaves out initializers that are also graph inputs (a feed may replace them)."""
        t = self._initializer.get(name)
        if t is not None:
            return t if overridable or name not in self._inputs else None
        site = self._producer.get(name)
        return None if site is None else constant_tensor(site.node)

    def value(self, name: str, *, overridable: bool = True) -> np.ndarray | None:
        """:meth:`constant` as an array, converted only when asked (converting every weight up
        front would copy the whole model)."""
        t = self.constant(name, overridable=overridable)
        return None if t is None else tensor_array(t)  # also a tensor left on disk (onnxutil.tensors)


def cleanup(model: onnx.ModelProto) -> None:
    """End of every editing pass, in place: initializers and ``Constant`` nodes nothing reads go
    (what a pass replaced), except an initializer that is also a graph input (an overridable
    default); then every graph is put in topological order. One pass is enough: constants read
    nothing. Nodes that compute are left alone even when nothing reads them: a probe adds such
    nodes on purpose (the sensitivity shadows, read only once exposed as outputs).

    Deleted by index, in place: clearing a field and re-adding the rest would copy every weight.
    """
    view = GraphView(model)
    for _, g in view.graphs:
        inputs = {i.name for i in g.input}
        for i in reversed(range(len(g.initializer))):
            if not view.uses(g.initializer[i].name) and g.initializer[i].name not in inputs:
                del g.initializer[i]
        for i in reversed(range(len(g.node))):
            node = g.node[i]
            if node.op_type == "Constant" and not any(view.uses(o) for o in node.output):
                del g.node[i]
    sort_nodes(model)
