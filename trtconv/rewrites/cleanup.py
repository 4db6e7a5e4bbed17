"""Clean-ups users otherwise do by hand before TensorRT will take a model.

Each returns what it changed, for the report; none changes what the model computes
(the graph proof in :mod:`trtconv.rewrites.proof` checks that on every run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.logger import G_LOGGER

from trtconv.load.model import iter_graphs

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# (op_type, input index) whose ONNX type constraint admits int32 *independently* of the
# node's other inputs, so an INT64 initializer there may become INT32 without a Cast.
# Shape-like inputs (Reshape shape, Slice starts/ends, Expand, Tile, Pad, Resize sizes,
# TopK k, ...) are int64-only or tied to sibling inputs in ONNX and stay INT64: TensorRT
# 10+ handles INT64 shape tensors natively, so nothing is gained by narrowing them.
INT32_OK_INPUTS: frozenset[tuple[str, int]] = frozenset({
    ("Gather", 1),
    ("GatherElements", 1),
    ("ScatterElements", 1),
    ("OneHot", 0),
})


@dataclass(frozen=True)
class CleanupResult:
    rule: str
    count: int
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "count": self.count, "items": list(self.items), "notes": list(self.notes)}


def _all_nodes(graph: gs.Graph) -> list[gs.Node]:
    nodes: list[gs.Node] = []

    def walk(g: gs.Graph) -> None:
        for n in g.nodes:
            nodes.append(n)
            for sub in n.attrs.values():
                if isinstance(sub, gs.Graph):
                    walk(sub)
                elif isinstance(sub, (list, tuple)):
                    for s in sub:
                        if isinstance(s, gs.Graph):
                            walk(s)

    walk(graph)
    return nodes


def _subgraphs(graph: gs.Graph) -> list[gs.Graph]:
    subs: list[gs.Graph] = []
    for n in _all_nodes(graph):
        for v in n.attrs.values():
            if isinstance(v, gs.Graph):
                subs.append(v)
            elif isinstance(v, (list, tuple)):
                subs.extend(s for s in v if isinstance(s, gs.Graph))
    return subs


def is_sorted(model: onnx.ModelProto) -> bool:
    """True if every node's inputs are produced before it (in every subgraph)."""

    def check(g: onnx.GraphProto, outer: set[str]) -> bool:
        known = set(outer) | {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
        for n in g.node:
            if any(i not in known for i in n.input):
                return False
            for a in n.attribute:
                subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
                if any(not check(s, known) for s in subs):
                    return False
            known.update(n.output)
        return True

    return check(model.graph, set())


def toposort(graph: gs.Graph, was_sorted: bool) -> CleanupResult:
    graph.toposort()
    return CleanupResult("toposort", 0 if was_sorted else 1,
                         notes=() if was_sorted else ("nodes arrived out of topological order; sorted",))


def remove_dead(graph: gs.Graph) -> CleanupResult:
    before = {id(n): n.name or f"(unnamed {n.op})" for n in _all_nodes(graph)}
    graph.cleanup(remove_unused_graph_inputs=False)
    after = {id(n) for n in _all_nodes(graph)}
    removed = sorted(label for key, label in before.items() if key not in after)
    return CleanupResult("remove-dead-nodes", len(removed), tuple(removed[:50]))


def fold_constants(graph: gs.Graph, size_limit: int) -> CleanupResult:
    """onnx-graphsurgeon's folding (evaluated by ONNX Runtime), results over ``size_limit`` bytes kept as nodes."""

    n_before = len(_all_nodes(graph))
    # Subgraphs (If/Loop bodies) are folded as models of their own: give them the main
    # graph's IR version and opsets, or onnx's newest IR version makes ONNX Runtime refuse them.
    for sub in _subgraphs(graph):
        sub.ir_version = graph.ir_version
        if sub.opset is None:
            sub.opset = graph.opset
        sub.import_domains = sub.import_domains or graph.import_domains
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # graphsurgeon's sessions: errors only
    severity = G_LOGGER.severity
    G_LOGGER.severity = G_LOGGER.ERROR  # partial failures are expected (custom ops) and harmless
    try:
        graph.fold_constants(size_threshold=size_limit, error_ok=True, flatten_subgraphs=False)
    finally:
        G_LOGGER.severity = severity
    graph.cleanup(remove_unused_graph_inputs=False)
    folded = n_before - len(_all_nodes(graph))
    return CleanupResult("fold-constants", max(folded, 0), notes=(f"size limit {size_limit} bytes",))


def int64_to_int32(graph: gs.Graph) -> CleanupResult:
    """Narrow INT64 initializers whose every consumer accepts INT32 and whose values fit."""
    consumers: dict[int, list[tuple[str, int]]] = {}
    consts: dict[int, gs.Constant] = {}
    outputs = {id(t) for t in graph.outputs}
    for n in _all_nodes(graph):
        for i, t in enumerate(n.inputs):
            if isinstance(t, gs.Constant) and np.dtype(t.dtype) == np.int64:
                consumers.setdefault(id(t), []).append((n.op, i))
                consts[id(t)] = t
    changed, kept = [], []
    for key, t in sorted(consts.items(), key=lambda kv: kv[1].name):
        uses = consumers[key]
        if key in outputs or not all(u in INT32_OK_INPUTS for u in uses):
            continue
        vals = np.asarray(t.values)
        if vals.size and (vals.min() < INT32_MIN or vals.max() > INT32_MAX):
            kept.append(f"{t.name}: values outside INT32 range (consumed by {', '.join(sorted({u[0] for u in uses}))})")
            continue
        t.values = vals.astype(np.int32)
        changed.append(t.name)
    return CleanupResult("int64-to-int32", len(changed), tuple(changed), tuple(kept))


def used_domains(model: onnx.ModelProto) -> set[str]:
    doms: set[str] = set()
    for g in iter_graphs(model.graph):
        doms.update((n.domain or "") for n in g.node)
    for f in model.functions:
        doms.add(f.domain or "")
        doms.update((n.domain or "") for n in f.node)
    return {"" if d == "ai.onnx" else d for d in doms}


def prune_opsets(model: onnx.ModelProto) -> CleanupResult:
    """Drop opset imports no node uses (the default domain always stays)."""
    used = used_domains(model) | {""}
    keep: list[onnx.OperatorSetIdProto] = []
    dropped: list[onnx.OperatorSetIdProto] = []
    for o in model.opset_import:
        dom = "" if o.domain in ("", "ai.onnx") else o.domain
        (keep if dom in used else dropped).append(o)
    if dropped:
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return CleanupResult("prune-opset-imports", len(dropped),
                         tuple(sorted(f"{o.domain or 'ai.onnx'} v{o.version}" for o in dropped)))


def rename_shared_dims(model: onnx.ModelProto) -> CleanupResult:
    """Give every dim of a graph input its own name where several share one dim_param
    (PP-OCR cls: H and W are both '?'). TensorRT treats equally named dims as equal, so a
    non-square profile fails the build; the names carry no meaning ONNX Runtime checks."""
    renamed = []
    for vi in model.graph.input:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        seen: set[str] = set()
        for axis, d in enumerate(dims):
            if not d.HasField("dim_param") or not d.dim_param:
                continue
            if d.dim_param in seen:
                new = f"{vi.name}_dim{axis}"
                renamed.append(f"{vi.name}[{axis}]: {d.dim_param!r} -> {new!r}")
                d.dim_param = new
            else:
                seen.add(d.dim_param)
    return CleanupResult("rename-shared-dims", len(renamed), tuple(renamed))
