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
from onnx import version_converter
from onnx_graphsurgeon.logger import G_LOGGER

from trtconv.errors import UnsupportedModelError
from trtconv.onnxutil import default_opset, gs_all_subgraphs, gs_nodes, iter_graphs, normalize_domain
from trtconv.rewrites.emitter import PENDING_DOMAIN

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# The IR version an opset needs (opset 19: IR 9; 16: IR 8); the conversion never goes newer.
MIN_IR_FOR_OPSET = {19: 9, 16: 8}

# (op_type, input index) whose ONNX type constraint admits int32 *independently* of the
# node's other inputs, so an INT64 initializer there may become INT32 without a Cast.
# Shape-like inputs (Reshape shape, Slice starts/ends, Expand, Tile, Pad, Resize sizes,
# TopK k, ...) are int64-only or tied to sibling inputs in ONNX and stay INT64: TensorRT
# 10+ handles INT64 shape tensors natively, so nothing is gained by narrowing them.
# Admitted by ONNX is not enough: the narrowed node must have an ONNX Runtime kernel too (the
# proofs run there). OneHot's indices are not listed: ONNX types them apart from the depth, but
# ONNX Runtime's kernels take INT32 indices only with an INT32 depth, so narrowing constant indices
# beside an INT64 depth computed at run time left a node no runtime could load (issue 33).
INT32_OK_INPUTS: frozenset[tuple[str, int]] = frozenset({
    ("Gather", 1),
    ("GatherElements", 1),
    ("ScatterElements", 1),
})


@dataclass(frozen=True)
class CleanupResult:
    rule: str
    count: int
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "count": self.count, "items": list(self.items), "notes": list(self.notes)}


def toposort(graph: gs.Graph, was_sorted: bool) -> CleanupResult:
    graph.toposort()
    return CleanupResult("toposort", 0 if was_sorted else 1,
                         notes=() if was_sorted else ("nodes arrived out of topological order; sorted",))


def remove_dead(graph: gs.Graph) -> CleanupResult:
    before = {id(n): n.name or f"(unnamed {n.op})" for n in list(gs_nodes(graph))}
    graph.cleanup(remove_unused_graph_inputs=False)
    after = {id(n) for n in list(gs_nodes(graph))}
    removed = sorted(label for key, label in before.items() if key not in after)
    return CleanupResult("remove-dead-nodes", len(removed), tuple(removed[:50]))


# Stands in for the op of a Shape node with start/end while onnx-graphsurgeon folds (see below).
_SPAN_SHAPE = "TrtconvShapeSpan"


def _shape_span(node: gs.Node) -> slice | None:
    """The dims a Shape node returns when its opset-15 ``start``/``end`` pick part of them."""
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    return None if start == 0 and end is None else slice(int(start), None if end is None else int(end))


def _fold_shape_spans(graph: gs.Graph) -> list[gs.Node]:
    """Fold every Shape node with ``start``/``end`` whose returned dims are static; hide the rest.

    onnx-graphsurgeon (0.6.1, the newest) folds a Shape node, and a Gather or Slice of one, from
    its input's whole shape and ignores ``start``/``end``: onnx-asr's WeSpeaker front-end
    (``Shape(waveforms, start=1)``) folded to ``[1, 16000]`` instead of ``[16000]`` under
    ``--shapes`` and the rewrite failed its proof. The dims are folded here as ONNX defines
    them (a slice of the shape, negative bounds counted from the rank); the Shape nodes left
    (some returned dim dynamic) get a placeholder op while graphsurgeon folds, so it cannot
    misread them, and :func:`_unhide` gives it back."""
    hidden = []
    for node in list(gs_nodes(graph)):
        span = _shape_span(node) if node.op == "Shape" else None
        if span is None:
            continue
        dims = node.inputs[0].shape
        picked = None if dims is None else list(dims)[span]
        if picked is not None and all(isinstance(d, (int, np.integer)) and d >= 0 for d in picked):
            out = node.outputs[0]
            out.to_constant(np.array(picked, dtype=np.int64))
            out.inputs.clear()
            continue
        node.op = _SPAN_SHAPE
        hidden.append(node)
    return hidden


def _unhide(nodes: list[gs.Node]) -> None:
    for node in nodes:
        node.op = "Shape"


def fold_constants(graph: gs.Graph, size_limit: int) -> CleanupResult:
    """onnx-graphsurgeon's folding (evaluated by ONNX Runtime), results over ``size_limit`` bytes kept as nodes."""

    n_before = len(list(gs_nodes(graph)))
    hidden = _fold_shape_spans(graph)
    # Subgraphs (If/Loop bodies) are folded as models of their own: give them the main
    # graph's IR version and opsets, or onnx's newest IR version makes ONNX Runtime refuse them.
    for sub in gs_all_subgraphs(graph):
        sub.ir_version = graph.ir_version
        if sub.opset is None:
            sub.opset = graph.opset
        sub.import_domains = sub.import_domains or graph.import_domains
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)  # graphsurgeon's sessions: its failures are handled here
    severity = G_LOGGER.severity
    G_LOGGER.severity = G_LOGGER.ERROR  # partial failures are expected (custom ops) and harmless
    try:
        graph.fold_constants(size_threshold=size_limit, error_ok=True, flatten_subgraphs=False)
    finally:
        G_LOGGER.severity = severity
        _unhide(hidden)
    graph.cleanup(remove_unused_graph_inputs=False)
    folded = n_before - len(list(gs_nodes(graph)))
    return CleanupResult("fold-constants", max(folded, 0), notes=(f"size limit {size_limit} bytes",))


def int64_to_int32(graph: gs.Graph) -> CleanupResult:
    """Narrow INT64 initializers whose every consumer accepts INT32 and whose values fit."""
    consumers: dict[int, list[tuple[str, int]]] = {}
    consts: dict[int, gs.Constant] = {}
    outputs = {id(t) for t in graph.outputs}
    for n in list(gs_nodes(graph)):
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
    return {normalize_domain(d) for d in doms}


def prune_opsets(model: onnx.ModelProto) -> CleanupResult:
    """Drop opset imports no node uses (the default domain always stays)."""
    used = used_domains(model) | {""}
    keep: list[onnx.OperatorSetIdProto] = []
    dropped: list[onnx.OperatorSetIdProto] = []
    for o in model.opset_import:
        (keep if normalize_domain(o.domain) in used else dropped).append(o)
    if dropped:
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return CleanupResult("prune-opset-imports", len(dropped),
                         tuple(sorted(f"{o.domain or 'ai.onnx'} v{o.version}" for o in dropped)))


RENAME_SHARED_DIMS = "rename-shared-dims"  # the clean-up's id; `check` names it as the fix for shared-dim-names


def shares_dims(model: onnx.ModelProto) -> bool:
    """Whether :func:`rename_shared_dims` would rename anything (without editing ``model``)."""
    for vi in model.graph.input:
        names = [d.dim_param for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param") and d.dim_param]
        if len(names) != len(set(names)):
            return True
    return False


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
    return CleanupResult(RENAME_SHARED_DIMS, len(renamed), tuple(renamed))


def finish_pending(model: onnx.ModelProto, need: int, what: str, large: bool) -> tuple[onnx.ModelProto, CleanupResult | None]:
    """Raise the default opset to ``need`` if lower (for ``what``, e.g. DeformConv), then move the
    nodes emitted in the pending domain into the default domain; the conversion, if any, as a result."""
    opset = default_opset(model)
    result = None
    if opset < need:
        if large:
            raise UnsupportedModelError(
                f"{what} needs opset {need}; this model is opset {opset} and too large to convert",
                hint=f"re-export at opset >= {need}, or use --dcn-target trt-plugin",
            )
        ir_version = model.ir_version
        try:
            model = version_converter.convert_version(model, need)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnsupportedModelError(
                f"cannot raise the model's opset from {opset} to {need} for {what}: {first[:300]}",
                hint=f"re-export at opset >= {need}, or use --dcn-target trt-plugin",
            ) from exc
        model.ir_version = max(ir_version, MIN_IR_FOR_OPSET.get(need, 9))  # never newer than ORT reads
        result = CleanupResult("opset-conversion", 1, (f"ai.onnx {opset} -> {need}",),
                               ("onnx.version_converter; proven by the graph proof",))
    for g in iter_graphs(model.graph):
        for n in g.node:
            if n.domain == PENDING_DOMAIN:
                n.domain = ""
    keep = [o for o in model.opset_import if o.domain != PENDING_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return model, result
