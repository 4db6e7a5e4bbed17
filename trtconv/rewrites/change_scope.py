"""Where a rewrite's change can reach: the part of the graph the whole-graph proof has to run.

Read from both models as plain data (names, ops, attributes; no weight bytes copied). A tensor is
*the same* on both sides when it is a graph input, a tensor the proof feeds (a cut), a constant of
the same bytes, or the output of a node both graphs hold with the same op, attributes, inputs and
outputs, every input the same. The same part needs running once, on the original: the *prefix*,
what the *boundary* (the same tensors the change reads) is computed from. Each side's *region*, its
nodes that are not the same, then runs on the boundary's values, and only the graph outputs the
change reaches are compared (:mod:`.scoped_proof` runs it).

Constants are the same by where their bytes came from (``kept``: the rewrite's untouched imported
weights, the very tensors of the original) or, where nothing vouches for them, by value when small;
a large weight is never copied to be compared with itself. A constant the rewrite folded (the
original computes it) is the same if it is an integer (a shape, indices) the prefix computes bit for
bit (a *check*).

Where the region cannot be isolated (subgraphs, changed inputs, outputs or opsets, local functions,
a cycle) :func:`change_scope` says why, and the proof runs both whole graphs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtconv.load import tensor_nbytes
from trtconv.onnxutil import normalize_domain, topological_order

# Constants up to this size that nothing vouches for are compared by value (shapes, biases,
# narrowed indices); larger ones are the same only by where their bytes came from.
COMPARE_BYTES = 1 << 20
# A folded integer constant (a shape, sizes, indices) up to this size is checked against what the
# prefix computes for it. A folded float constant counts as changed, and its readers join the
# region: equal values are not enough there, as ONNX Runtime computes with a constant weight
# through other kernels (prepacked) than with a computed one, which rounds otherwise.
CHECK_BYTES = 16 << 20
# The same holds for folded 8-bit weights (a quantized model's folded QuantizeLinear): only the
# types of shapes, indices and masks are checked.
CHECKED_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL})


@dataclass(frozen=True)
class Scope:
    """The proof's plan. Node lists are indices into each model's main graph, producers first."""

    prefix: tuple[int, ...]  # original's nodes run once: what the boundary and the checks need
    region_before: tuple[int, ...]  # original's nodes the change reaches (toward compared outputs)
    region_after: tuple[int, ...]  # rewritten nodes that are not the same: every one runs
    boundary: tuple[str, ...]  # same tensors (not constants) the regions read
    checks: tuple[str, ...]  # rewritten model's folded constants the prefix must reproduce
    outputs: tuple[str, ...]  # graph outputs the change reaches: compared
    unreached: tuple[str, ...]  # graph outputs it cannot reach: the same by construction
    shared: frozenset[str]  # rewritten model's constants with the original's bytes (stored once)

    def to_json(self, nodes: tuple[int, int]) -> dict[str, object]:
        ran = bool(self.outputs)  # the original's region runs only toward an output the change reaches
        return {"whole_graph": False, "why": "", "nodes": list(nodes),
                "nodes_run": [len(self.prefix) + ran * len(self.region_before), len(self.region_after)],
                "prefix": len(self.prefix), "region": [len(self.region_before), len(self.region_after)],
                "boundary": len(self.boundary), "checks": len(self.checks),
                "outputs_compared": list(self.outputs), "outputs_unreached": list(self.unreached)}


def initializers(g: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in g.initializer}


def change_scope(before: onnx.ModelProto, after: onnx.ModelProto, fed: Collection[str],
                 kept: Mapping[str, onnx.TensorProto]) -> Scope | str:
    """The proof's plan for ``before`` -> ``after``, or why the region cannot be isolated.

    ``fed``: tensors the proof feeds random data on both sides (cuts: their producers do not run).
    ``kept``: rewritten-model constant name -> the original's tensor its bytes were exported from."""
    why = _unscopable(before, after)
    if why:
        return why
    b, a = before.graph, after.graph
    consts_b, consts_a = initializers(b), initializers(a)
    nodes_b = _live(b, fed)
    nodes_a = _live(a, fed)
    order_b, stuck_b = topological_order(b)
    order_a, stuck_a = topological_order(a)
    if stuck_b is not None or stuck_a is not None:
        return "a graph has a cycle"
    producer_b = {o: i for i in nodes_b for o in b.node[i].output if o}
    inputs = {i.name for i in b.input if i.name not in consts_b} | set(fed)

    same: set[str] = set(inputs)  # names computed equally on both sides
    shared: set[str] = set()
    checks: list[str] = []
    for name, t in consts_a.items():
        if name in inputs:
            continue
        if name in consts_b:
            if _same_constant(consts_b[name], t, kept.get(name)):
                same.add(name)
                shared.add(name)
        elif name in producer_b and t.data_type in CHECKED_TYPES and tensor_nbytes(t) <= CHECK_BYTES:
            same.add(name)  # folded shape or index: the same if the prefix computes these values
            checks.append(name)
    same_nodes: set[int] = set()
    for i in order_a:
        if i not in nodes_a:
            continue
        n = a.node[i]
        m = producer_b.get(next((o for o in n.output if o), ""))
        if m is not None and all(x in same for x in n.input if x) and _signature(n) == _signature(b.node[m]):
            same_nodes.add(i)
            same.update(o for o in n.output if o)

    outputs = [o.name for o in a.output if o.name not in same]
    unreached = [o.name for o in a.output if o.name in same]
    produced_a = {o for i in nodes_a - same_nodes for o in a.node[i].output if o}
    for o in outputs:
        if o not in produced_a or o not in producer_b:
            return f"output {o!r} is not computed by a node on both sides"
    region_a = [i for i in order_a if i in nodes_a and i not in same_nodes]
    region_b = _ancestors(b, outputs, producer_b, stop=same | set(consts_b))
    boundary = sorted({x for i in region_a for x in a.node[i].input if x in same and x not in consts_a}
                      | {x for i in region_b for x in b.node[i].input if x in same and x not in consts_b})
    wanted = [x for x in boundary if x not in inputs] + [c for c in checks if c not in boundary]
    prefix = _ancestors(b, wanted, producer_b, stop=inputs | set(consts_b))  # the original's own computation
    return Scope(tuple(i for i in order_b if i in prefix), tuple(i for i in order_b if i in region_b),
                 tuple(region_a), tuple(boundary), tuple(sorted(checks)), tuple(outputs), tuple(unreached),
                 frozenset(shared))


def _unscopable(before: onnx.ModelProto, after: onnx.ModelProto) -> str:
    """Why the changed region of ``before`` -> ``after`` cannot be run apart from the rest ("" when it can)."""
    for m in (before, after):
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in m.graph.node
               for a in n.attribute):
            return "the graph has If/Loop/Scan bodies (they read outer values)"
        if m.functions:
            return "the model has local functions"
    ob = {normalize_domain(o.domain): o.version for o in before.opset_import}
    oa = {normalize_domain(o.domain): o.version for o in after.opset_import}
    if any(d in ob and ob[d] != v for d, v in oa.items()):  # a domain new to the rewrite: only its own nodes read it
        return "the opset changed (every node's meaning may have)"
    if _real_inputs(before) != _real_inputs(after):
        return "the graph's inputs changed"
    if [o.name for o in before.graph.output] != [o.name for o in after.graph.output]:
        return "the graph's outputs changed"
    return ""


def _real_inputs(m: onnx.ModelProto) -> list[tuple[str, int, tuple[int | None, ...]]]:
    """Inputs that are not constants: name, element type and fixed dims (dim names do not compute)."""
    consts = {t.name for t in m.graph.initializer}
    return [(i.name, i.type.tensor_type.elem_type,
             tuple(d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim))
            for i in m.graph.input if i.name not in consts]


def _live(g: onnx.GraphProto, fed: Collection[str]) -> set[int]:
    """Nodes that run: those writing a fed tensor are cut (the proof feeds it instead)."""
    return {i for i, n in enumerate(g.node) if not any(o in fed for o in n.output)}


def _signature(n: onnx.NodeProto) -> tuple[object, ...]:
    return (normalize_domain(n.domain), n.op_type, tuple(n.input), tuple(n.output),
            tuple(sorted(a.SerializeToString() for a in n.attribute)))


def _same_constant(b: onnx.TensorProto, a: onnx.TensorProto, source: onnx.TensorProto | None) -> bool:
    """Whether ``a`` (rewritten) holds ``b``'s (original) values, never copying a large weight to know."""
    if (b.data_type, list(b.dims)) != (a.data_type, list(a.dims)):
        return False
    if source is b:
        return True  # exported from the original's own tensor, untouched
    external = onnx.TensorProto.EXTERNAL
    if b.data_location == external or a.data_location == external:
        return (b.data_location == a.data_location and
                list(b.external_data) == list(a.external_data))  # same file, offset and length
    if tensor_nbytes(b) > COMPARE_BYTES:
        return False  # changed as far as the proof knows: its readers join the region
    return bool(np.array_equal(numpy_helper.to_array(b), numpy_helper.to_array(a), equal_nan=True))


def _ancestors(g: onnx.GraphProto, wanted: Collection[str], producer: Mapping[str, int],
               stop: Collection[str]) -> set[int]:
    """Indices of the nodes ``wanted`` is computed from, not looking past ``stop``."""
    found: set[int] = set()
    todo = [x for x in wanted if x not in stop]
    seen = set(todo)
    while todo:
        i = producer.get(todo.pop())
        if i is None or i in found:
            continue
        found.add(i)
        for x in g.node[i].input:
            if x and x not in stop and x not in seen:
                seen.add(x)
                todo.append(x)
    return found

