"""One pass over the model (subgraphs included) that builds every lookup the rules need.

Rules ask "is this input a constant?", "what is its value / dtype / rank?". Answering
from maps built once keeps ``check`` linear in the number of nodes (100k-node graphs
take seconds). The same pass validates the structure: a tensor read before anything
produces it, a cycle, or a tensor produced twice makes the model invalid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from trtconv.errors import InvalidModelError
from trtconv.onnxutil import is_default_domain, normalize_domain, opset_versions, subgraphs, topological_order

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class NodeRef:
    node: onnx.NodeProto
    path: str  # e.g. "If_0/then_branch/Conv_3"
    opset: int  # version of the node's domain in the model


def display_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


@dataclass
class GraphIndex:
    """Name -> facts maps over the main graph and all subgraphs (ONNX names are global)."""

    opsets: dict[str, int]  # normalised domain ("" default) -> version
    nodes: list[NodeRef] = field(default_factory=list)
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    tensors: dict[str, onnx.TensorProto] = field(default_factory=dict)  # initializers + Constant values
    dtypes: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, onnx.TensorShapeProto] = field(default_factory=dict)
    initializers: set[str] = field(default_factory=set)
    consumed: set[str] = field(default_factory=set)  # tensors some node reads or a graph returns
    branch_conditions: dict[str, str] = field(default_factory=dict)  # "If_0/then_branch/" -> the If's condition
    warnings: list[str] = field(default_factory=list)

    # --- queries used by the rules -------------------------------------------------
    def constant_source(self, name: str) -> onnx.TensorProto | None:
        """The tensor behind ``name`` if it is an initializer or a Constant (through Identity)."""
        for _ in range(8):
            if name in self.tensors:
                return self.tensors[name]
            prod = self.producer.get(name)
            if prod is None or prod.op_type != "Identity" or not prod.input:
                return None
            name = prod.input[0]
        return None

    def is_constant(self, name: str) -> bool:
        return self.constant_source(name) is not None

    def in_runtime_branch(self, path: str) -> bool:
        """Whether the node at ``path`` sits in an If branch chosen at run time. An If whose condition is
        a constant is no branch for TensorRT: its parser imports only the branch taken, inline."""
        return any(path.startswith(prefix) and not self.is_constant(cond)
                   for prefix, cond in self.branch_conditions.items())

    def is_graph_input(self, name: str) -> bool:
        """A network input: nothing produces it and it is not a constant (subgraph inputs included)."""
        return bool(name) and name not in self.producer and name not in self.tensors

    def depends_on_values(self, name: str, limit: int = 10000) -> bool:
        """Whether ``name`` is computed from some input's *value* (not only from shapes via Shape/Size)."""
        seen: set[str] = set()
        todo = [name]
        while todo and len(seen) < limit:
            cur = todo.pop()
            if not cur or cur in seen or cur in self.tensors:
                continue
            seen.add(cur)
            prod = self.producer.get(cur)
            if prod is None:
                return True  # a graph (or subgraph) input: its value
            if prod.op_type in ("Shape", "Size"):
                continue
            todo.extend(prod.input)
        return False

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value, or None if not a constant or its bytes live in unloaded external data."""
        t = self.constant_source(name)
        if t is None or t.data_location == onnx.TensorProto.EXTERNAL:
            return None
        try:
            return numpy_helper.to_array(t)
        except Exception:
            return None

    def dims(self, name: str) -> list[int | str | None] | None:
        """Dims of ``name``: int if fixed, symbol name if symbolic, None if unknown."""
        t = self.tensors.get(name)
        if t is not None:
            return list(t.dims)
        shp = self.shapes.get(name)
        if shp is None:
            return None
        return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in shp.dim]

    def rank(self, name: str) -> int | None:
        d = self.dims(name)
        return None if d is None else len(d)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr.t
        if attr.name in ("value_int", "value_ints", "value_float", "value_floats"):
            return _scalar_tensor(node, attr)
    return None


def _scalar_tensor(node: onnx.NodeProto, attr: onnx.AttributeProto) -> onnx.TensorProto:
    value = onnx.helper.get_attribute_value(attr)
    dtype = np.int64 if attr.name.startswith("value_int") else np.float32
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), node.output[0] if node.output else "")


def _collect_types(index: GraphIndex, graph: onnx.GraphProto) -> None:
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if tt.elem_type:
            index.dtypes[vi.name] = tt.elem_type
        if tt.HasField("shape"):
            index.shapes[vi.name] = tt.shape  # dims are parsed on demand: few rules need them
    for t in graph.initializer:
        index.tensors[t.name] = t
        index.initializers.add(t.name)
        index.dtypes[t.name] = t.data_type


def _broken(path: str, node: onnx.NodeProto, what: str) -> InvalidModelError:
    return InvalidModelError(
        f"invalid graph: node {path!r} ({node.op_type}) {what}",
        hint="the ONNX graph is structurally broken; re-export the model (onnx.checker.check_model shows details)",
    )


def _check_order(graph: onnx.GraphProto, prefix: str, outer: Sequence[set[str]],
                 defined: set[str], index: GraphIndex) -> list[tuple[int, str]]:
    """Inputs read before they are produced: (node index, tensor) pairs. Also records producers."""
    late: list[tuple[int, str]] = []
    produced_here = {o for n in graph.node for o in n.output if o}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined and not any(name in s for s in outer):
                if name not in produced_here:
                    raise _broken(prefix + display_name(node, i), node,
                                  f"reads tensor {name!r}, which no node, graph input or initializer produces")
                late.append((i, name))
        for name in node.output:
            if not name:
                continue
            if name in defined or any(name in s for s in outer):
                raise _broken(prefix + display_name(node, i), node,
                              f"produces tensor {name!r}, which already exists (names must be unique)")
            defined.add(name)
            index.producer[name] = node
    return late


def _walk(index: GraphIndex, graph: onnx.GraphProto, prefix: str, outer: list[set[str]]) -> None:
    _collect_types(index, graph)
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    late = _check_order(graph, prefix, outer, defined, index)
    if late:
        _, cyc = topological_order(graph)
        if cyc is not None:
            node = graph.node[cyc]
            raise _broken(prefix + display_name(node, cyc), node, "is part of a cycle")
        index.warnings.append(
            f"graph {prefix or '(main)'} is not topologically sorted (first: node "
            f"{display_name(graph.node[late[0][0]], late[0][0])!r}); TensorRT's parser sorts it, onnx.checker rejects it"
        )
    scope = [*outer, defined]
    index.consumed.update(o.name for o in graph.output)
    for i, node in enumerate(graph.node):
        index.consumed.update(node.input)
        path = prefix + display_name(node, i)
        domain = node.domain or ""
        opset = index.opsets.get(normalize_domain(domain), 0 if is_default_domain(domain) else 1)
        index.nodes.append(NodeRef(node, path, opset))
        if node.op_type == "Constant" and is_default_domain(domain) and node.output:
            t = _constant_tensor(node)
            if t is not None:
                index.tensors[node.output[0]] = t
                index.dtypes.setdefault(node.output[0], t.data_type)
        for attr_name, sub in subgraphs(node):
            if node.op_type == "If" and node.input:
                index.branch_conditions[f"{path}/{attr_name}/"] = node.input[0]
            _walk(index, sub, f"{path}/{attr_name}/", scope)


def build_index(model: onnx.ModelProto) -> GraphIndex:
    """Index ``model`` (shape-inferred for best results); raise InvalidModelError on broken structure."""
    opsets = opset_versions(model.opset_import)
    index = GraphIndex(opsets)
    _walk(index, model.graph, "", [])
    return index


def int64_out_of_range(t: onnx.TensorProto) -> int | None:
    """An INT64 value of ``t`` outside the INT32 range (the largest in magnitude), or None."""
    if t.data_type != onnx.TensorProto.INT64 or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    arr = numpy_helper.to_array(t)
    if arr.size == 0:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    if hi > INT32_MAX:
        return hi
    if lo < INT32_MIN:
        return lo
    return None
