"""The split of ``build --split-tail``: a model cut in two where its data-dependent post-processing
starts, because the target cannot run it (TensorRT-RTX: ``NonZero`` is imported through a plugin
RTX lacks, ``NonMaxSuppression`` parses but its builder has no runner for it).

* the **head**: every node of the main graph not downstream of such a node. It goes through the
  normal build and becomes the engine. Its outputs: the model's outputs it computes, then the
  tensors the tail reads from it (the *cut*), names kept.
* the **tail**: the first such node and everything downstream of it (plus the light head nodes that
  only feed it, where moving them does not widen the cut), as an ONNX model for ONNX Runtime. Its inputs: the cut tensors, plus any model input it reads itself; its
  outputs: the model's outputs the head does not compute.

The cut is made on the main graph only: a node the target cannot run inside an If/Loop/Scan
body that stays in the head is declined (the cut would cross into the subgraph). A container
downstream of the cut goes to the tail whole, with the outer names its body reads.

:func:`prove_cut` runs the original and head → tail on ONNX Runtime on the same inputs: the
composition must give the original's outputs (same float graph: equal up to rounding).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from trtconv.errors import InvalidModelError, UnsupportedModelError
from trtconv.load import graph_dtypes, value_shapes
from trtconv.onnxutil import (
    cleanup,
    has_subgraphs,
    is_default_domain,
    iter_graphs,
    iter_graphs_with_path,
    subgraphs,
)
from trtconv.reference import OutputStats, compare_arrays, run, session
from trtconv.settings import RTX_TARGET

# The data-dependent ops each target cannot run (measured with TensorRT-RTX 1.7.1); TensorRT 10/11
# run both natively, so nothing is split there.
TAIL_OPS: Mapping[str, tuple[str, ...]] = {RTX_TARGET: ("NonZero", "NonMaxSuppression")}
TAIL_SUFFIX = ".tail.onnx"
# Ops that stay in the engine even when only the tail reads them: the work TensorRT is there for.
HEAVY_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger",
                       "QLinearMatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN", "Attention", "DeformConv"})
SPLIT_FLAG = "--split-tail"


def tail_ops(target: str) -> tuple[str, ...]:
    """The ops ``target`` cannot run that ``--split-tail`` moves to the ONNX Runtime tail (none: no split)."""
    return TAIL_OPS.get(target, ())


@dataclass(frozen=True)
class CutTensor:
    """A tensor that crosses the cut: an engine output the tail reads (or a model input it reads)."""

    name: str
    dtype: str  # numpy's name: float32, int64, ...
    shape: tuple[int | str | None, ...] | None  # None: rank unknown; a str: a symbolic dim
    source: str = "head"  # "head": an engine output; "input": a model input the tail reads itself

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape),
                "source": self.source}


@dataclass(frozen=True)
class TailCut:
    head: onnx.ModelProto
    tail: onnx.ModelProto
    cut: tuple[CutTensor, ...]  # the tail's inputs, in its input order
    at: tuple[str, ...]  # the nodes the target cannot run that start the tail ("name (op)")
    head_nodes: int
    tail_nodes: int
    head_outputs: tuple[str, ...]  # the model's outputs the engine computes
    tail_outputs: tuple[str, ...]  # the model's outputs the tail computes

    def to_json(self) -> dict[str, Any]:
        return {"at": list(self.at), "cut": [c.to_json() for c in self.cut], "head_nodes": self.head_nodes,
                "tail_nodes": self.tail_nodes, "engine_outputs": list(self.head_outputs),
                "tail_outputs": list(self.tail_outputs)}


@dataclass(frozen=True)
class CutProof:
    """Original vs head → tail on ONNX Runtime, on the same inputs."""

    passed: bool | None  # None: not run (``reason`` says why)
    inputs: str  # "sample data" or "seeded random (seed N)"
    stats: tuple[OutputStats, ...] = ()
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    tolerance: float = 0.0
    reason: str = ""
    arithmetic: str = "float32"  # what was proven: the float graphs (an FP16/INT8 engine is checked by verify)

    @property
    def max_abs(self) -> float | None:
        return max((s.max_abs for s in self.stats), default=None)

    @property
    def max_rel(self) -> float | None:
        return max((s.max_rel for s in self.stats), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"method": "onnxruntime", "passed": self.passed, "inputs": self.inputs, "tolerance": self.tolerance,
                "max_abs": self.max_abs, "max_rel": self.max_rel, "outputs": [s.to_json() for s in self.stats],
                "shapes": {k: list(v) for k, v in sorted(self.shapes.items())}, "reason": self.reason,
                "arithmetic": self.arithmetic}


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """The names ``node``'s bodies read from outside them (a branch reads its parent's tensors by name)."""
    read: set[str] = set()
    defined: set[str] = set()
    for _, body in subgraphs(node):
        for g in iter_graphs(body):
            defined.update(i.name for i in g.input)
            defined.update(t.name for t in g.initializer)
            for n in g.node:
                read.update(i for i in n.input if i)
                defined.update(o for o in n.output if o)
    return read - defined


def _reads(node: onnx.NodeProto) -> set[str]:
    return {i for i in node.input if i} | _outer_reads(node)


def _is_tail_op(node: onnx.NodeProto, ops: Collection[str]) -> bool:
    return node.op_type in ops and is_default_domain(node.domain)


def _tail_mask(graph: onnx.GraphProto, ops: Collection[str]) -> list[bool]:
    """Which main-graph nodes go to the tail: the target's ops and everything reading what they feed."""
    tainted: set[str] = set()
    mask = []
    for node in graph.node:
        in_tail = _is_tail_op(node, ops) or bool(_reads(node) & tainted)
        if in_tail:
            tainted.update(o for o in node.output if o)
        mask.append(in_tail)
    return mask


def _narrow_cut(graph: onnx.GraphProto, mask: list[bool]) -> None:
    """Move into the tail the light head nodes that only feed it, where that does not widen the cut (a
    detector's per-class score slices and threshold masks: one tensor crosses instead of one per class).
    In place; never a model output, a container, a Constant, a heavy op (``HEAVY_OPS``) or a node reading a
    model input (what the engine exists for stays in it)."""
    nodes = list(graph.node)
    returned = {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    consts = {t.name for t in graph.initializer} | {o for n in nodes if n.op_type == "Constant" for o in n.output}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for r in _reads(n):
            readers.setdefault(r, []).append(i)
    crossing = {r for i, n in enumerate(nodes) if mask[i] for r in _reads(n)}
    moved = True
    while moved:
        moved = False
        for i in reversed(range(len(nodes))):
            n = nodes[i]
            outs = [o for o in n.output if o]
            if (mask[i] or n.op_type in HEAVY_OPS or n.op_type == "Constant" or has_subgraphs(n) or not outs
                    or any(o in returned for o in outs)
                    or not all(mask[j] for o in outs for j in readers.get(o, ()))):
                continue
            new = {r for r in _reads(n) if r not in consts and r not in crossing}
            if not new & inputs and len(new) <= sum(o in crossing for o in outs):  # the engine keeps its inputs
                mask[i] = moved = True
                crossing = (crossing - set(outs)) | new


def _refuse_nested(graph: onnx.GraphProto, mask: list[bool], ops: Collection[str]) -> None:
    """A node the target cannot run inside a body that stays in the head: the cut would cross into it."""
    for node, in_tail in zip(graph.node, mask):
        if in_tail:
            continue
        for label, body in subgraphs(node):
            for path, g in iter_graphs_with_path(body, f"{node.name or node.op_type}/{label}"):
                bad = next((n for n in g.node if _is_tail_op(n, ops)), None)
                if bad is not None:
                    raise UnsupportedModelError(
                        f"{SPLIT_FLAG}: {bad.op_type} node {bad.name or '?'} is inside the body {path} of "
                        f"{node.op_type} node {node.name or '?'}, which would stay in the engine: the split cuts the "
                        "main graph only, never into a subgraph",
                        hint="build for TensorRT 10/11, which run it natively, or export the model with the "
                        f"{bad.op_type} outside the {node.op_type}")


def _value_info(name: str, dtypes: Mapping[str, int], shapes: Mapping[str, list[int | str | None]]
                ) -> onnx.ValueInfoProto:
    if name not in dtypes:
        raise UnsupportedModelError(f"{SPLIT_FLAG}: the type of tensor {name!r}, which crosses the cut, is unknown",
                                    hint="run the model through onnx shape inference (or re-export it) so that "
                                    "every tensor has a type")
    dims = shapes.get(name)
    return helper.make_tensor_value_info(name, dtypes[name], None if dims is None else
                                         [d if d is not None else "" for d in dims])


def _cut_tensor(vi: onnx.ValueInfoProto, source: str) -> CutTensor:
    tt = vi.type.tensor_type
    dtype = str(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    shape = None if not tt.HasField("shape") else tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return CutTensor(vi.name, dtype, shape, source)


def cut_tail(model: onnx.ModelProto, ops: Collection[str], inferred: onnx.ModelProto | None = None) -> TailCut | None:
    """``model`` cut at its first node of ``ops`` (None: it has none in its main graph). ``inferred``:
    the model after shape inference (types and shapes of the cut tensors); default ``model``."""
    graph = model.graph
    mask = _tail_mask(graph, ops)
    _refuse_nested(graph, mask, ops)
    if not any(mask):
        return None
    _narrow_cut(graph, mask)
    head_nodes = [n for n, t in zip(graph.node, mask) if not t]
    tail_nodes = [n for n, t in zip(graph.node, mask) if t]
    at = tuple(f"{n.name or '?'} ({n.op_type})" for n in tail_nodes if _is_tail_op(n, ops))
    info = inferred if inferred is not None else model
    dtypes, shapes = graph_dtypes(info.graph), value_shapes(info)
    inputs = {i.name: i for i in graph.input}
    inits = {t.name: t for t in graph.initializer}
    produced_in_head = {o for n in head_nodes for o in n.output if o}
    constants = {o: n for n in head_nodes if n.op_type == "Constant" and not _outer_reads(n) for o in n.output}
    tail_reads = sorted({r for n in tail_nodes for r in _reads(n)} - {o for n in tail_nodes for o in n.output})
    crossing = [r for r in tail_reads if r in produced_in_head and r not in constants]
    from_inputs = [r for r in tail_reads if r in inputs and r not in inits]
    head_outputs = tuple(o.name for o in graph.output if o.name in produced_in_head or o.name in inputs)
    tail_outputs = tuple(o.name for o in graph.output if o.name not in head_outputs)
    if not head_nodes or (not crossing and not head_outputs):
        raise UnsupportedModelError(
            f"{SPLIT_FLAG}: the model's first node TensorRT cannot run ({at[0]}) reads only model inputs: the "
            "engine would compute nothing", hint="run the model on ONNX Runtime as it is")
    if not tail_outputs:
        raise UnsupportedModelError(f"{SPLIT_FLAG}: no output of the model depends on {at[0]}",
                                    hint="remove the unused nodes from the model (`trtconv rewrite` drops them)")
    declared = {o.name: o for o in graph.output}
    head_out = [declared[o] for o in head_outputs] + [_value_info(c, dtypes, shapes) for c in crossing
                                                       if c not in head_outputs]
    head = _submodel(model, head_nodes, [i for i in graph.input if i.name not in inits],
                     head_out, inits.values())
    _drop_unread_inputs(head)
    tail_in = [_value_info(c, dtypes, shapes) for c in crossing] + [inputs[i] for i in from_inputs]
    tail_const = [constants[r] for r in tail_reads if r in constants]
    tail = _submodel(model, [*tail_const, *tail_nodes], tail_in, [declared[o] for o in tail_outputs],
                     inits.values())
    cut = tuple(_cut_tensor(vi, "head") for vi in tail_in[:len(crossing)]) + tuple(
        _cut_tensor(vi, "input") for vi in tail_in[len(crossing):])
    return TailCut(head, tail, cut, at, len(head.graph.node), len(tail_nodes), head_outputs, tail_outputs)


def _submodel(model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto], inputs: Iterable[onnx.ValueInfoProto],
              outputs: Iterable[onnx.ValueInfoProto], initializers: Iterable[onnx.TensorProto]) -> onnx.ModelProto:
    """A model of ``nodes`` with the original's opsets, functions and metadata; unread initializers go."""
    nodes, outputs = list(nodes), list(outputs)
    read = {r for n in nodes for r in _reads(n)} | {o.name for o in outputs}  # an output may be a constant
    graph = helper.make_graph(nodes, model.graph.name, list(inputs), outputs,
                              [t for t in initializers if t.name in read])
    keep = {vi.name for vi in graph.input} | {vi.name for vi in graph.output}
    produced = {o for n in nodes for o in n.output}
    graph.value_info.extend(vi for vi in model.graph.value_info if vi.name in produced and vi.name not in keep)
    out = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                            producer_name=model.producer_name, producer_version=model.producer_version)
    out.functions.extend(model.functions)
    out.metadata_props.extend(model.metadata_props)
    cleanup(out)
    return out


def _drop_unread_inputs(model: onnx.ModelProto) -> None:
    """A model input only the tail reads is no engine input (TensorRT refuses unused inputs)."""
    read = {r for n in model.graph.node for r in _reads(n)} | {o.name for o in model.graph.output}
    kept = [i for i in model.graph.input if i.name in read]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def tail_feeds(cut: TailCut, engine_outputs: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]
               ) -> dict[str, np.ndarray]:
    """What the tail is fed: the engine's cut outputs, and the model inputs it reads itself."""
    return {c.name: (engine_outputs if c.source == "head" else inputs)[c.name] for c in cut.cut}


def prove_cut(original: onnx.ModelProto | str, cut: TailCut, feeds: Mapping[str, np.ndarray], *, inputs: str,
              tolerance: float) -> CutProof:
    """Original vs head → tail on ONNX Runtime (graph optimizations off: the graphs as written)."""
    try:
        want = run(session(original), feeds)
    except InvalidModelError as exc:
        return CutProof(None, inputs, reason=f"ONNX Runtime cannot run the original: {exc.message}")
    head_feeds = {i.name: feeds[i.name] for i in cut.head.graph.input}
    got = run(session(cut.head), head_feeds)
    got.update(run(session(cut.tail), tail_feeds(cut, got, feeds)))
    stats, passed = [], True
    for name, ref in want.items():
        value = got[name]
        if value.shape != ref.shape:
            return CutProof(False, inputs, tuple(stats), tolerance=tolerance,
                            reason=f"output {name!r}: shape {list(value.shape)} from head → tail, {list(ref.shape)} "
                            "from the original")
        s = compare_arrays(name, ref, value)
        stats.append(s)
        scale = float(np.max(np.abs(ref.astype(np.float64)))) if ref.size and ref.dtype.kind in "fiu" else 0.0
        passed = passed and s.nonfinite == 0 and s.max_abs <= tolerance * max(1.0, scale)
    shapes = {k: tuple(int(d) for d in v.shape) for k, v in feeds.items()}
    return CutProof(passed, inputs, tuple(stats), shapes, tolerance)
