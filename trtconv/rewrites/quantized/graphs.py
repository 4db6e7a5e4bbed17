"""Reading ONNX Runtime's quantized patterns out of a graphsurgeon graph. The original pattern the
proofs run in ONNX Runtime (:class:`Original`) is the proof framework's, re-exported here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs

# ONNX Runtime's dequantization of constants (onnxutil's: INT8's measurement stores it too), re-exported for the rules here
from trtconv.onnxutil import dequantized as dequantized
from trtconv.onnxutil import per_axis as per_axis
from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import MS_DOMAIN as MS_DOMAIN  # the framework's, re-exported for the rules here
from trtconv.rewrites.proof import Original as Original
from trtconv.rewrites.proof import original_model as original_model

INT_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
              # quantize_static's 16-bit activations/weights (QuantType.QInt16/QUInt16)
              np.dtype(np.int16): (-32768, 32767), np.dtype(np.uint16): (0, 65535)}
QOPERATOR_OPS = {("", "QLinearConv"), ("", "QLinearMatMul"), (MS_DOMAIN, "QGemm"), (MS_DOMAIN, "QLinearAdd"),
                 (MS_DOMAIN, "QLinearMul"), (MS_DOMAIN, "QLinearSigmoid"), (MS_DOMAIN, "QLinearGlobalAveragePool"),
                 (MS_DOMAIN, "QLinearConcat"), (MS_DOMAIN, "QLinearLeakyRelu"), (MS_DOMAIN, "QLinearAveragePool"),
                 (MS_DOMAIN, "QLinearSoftmax")}
# ops that move or select values without computing: a quantized tensor passes through them unchanged
PASSTHROUGH = ("Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "MaxPool", "Slice", "Gather",
               "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Split")


def is_float(t: gs.Tensor) -> bool:
    """A tensor already float: an earlier rewrite's output, or a float model tensor."""
    return t.dtype is not None and np.dtype(t.dtype).kind == "f"


def float_root(t: gs.Tensor) -> gs.Tensor | None:
    """Up through pass-through ops to where ``t`` comes from, if that is float by now (an earlier
    rewrite's output); the pass-through tensors on the way are marked float. None otherwise."""
    path = []
    cur: gs.Tensor | None = t
    while cur is not None and not is_float(cur):
        p = producer(cur)
        if p is None or p.op not in PASSTHROUGH:
            return None
        path.append(cur)
        cur = p.inputs[0]
    if cur is None:
        return None
    for x in path:
        x.dtype = np.float32
    return cur


def feeds_qoperator(t: gs.Tensor) -> bool:
    """Whether a QOperator op reads ``t``, directly or through pass-through ops."""
    for c in t.outputs:
        if ((c.domain or "", c.op) in QOPERATOR_OPS
                or (c.op in PASSTHROUGH and c.outputs and feeds_qoperator(c.outputs[0]))):
            return True
    return False


def float_frontier(t: gs.Tensor) -> frozenset[str]:
    """The first float tensors downstream of quantized ``t`` (its DequantizeLinear outputs, through
    pass-through ops): where a whole-graph proof can cut both models."""
    out: set[str] = set()
    for c in t.outputs:
        if c.op == "DequantizeLinear" and c.outputs:
            out.add(c.outputs[0].name)
        elif c.op in PASSTHROUGH and c.outputs:
            out |= float_frontier(c.outputs[0])
    return frozenset(out)


def matmul_bias(em: Emitter, x: gs.Tensor, w: gs.Tensor, bias: np.ndarray | None, out: gs.Tensor) -> str:
    """``out = x @ w (+ bias)`` in float, as the dequantized forms of the MatMul rules write it; returns
    what was written ("MatMul" or "MatMul+Add")."""
    if bias is None:
        em.node("MatMul", "matmul", [x, w], [out])
        return "MatMul"
    mm = em.var("matmul", dtype=np.float32)
    em.node("MatMul", "matmul", [x, w], [mm])
    em.node("Add", "bias", [mm, em.const("bias", bias)], [out])
    return "MatMul+Add"


def producer(t: gs.Tensor | None) -> gs.Node | None:
    return t.inputs[0] if t is not None and isinstance(t, gs.Variable) and len(t.inputs) == 1 else None


def sole_consumer(t: gs.Tensor, graph_outputs: frozenset[str]) -> gs.Node | None:
    """The one node reading ``t`` (None when several do, or the graph outputs it)."""
    if t.name in graph_outputs or len(t.outputs) != 1:
        return None
    return t.outputs[0]


def const(t: gs.Tensor | None) -> np.ndarray | None:
    return np.asarray(t.values) if isinstance(t, gs.Constant) else None


def given(node: gs.Node, i: int) -> gs.Tensor | None:
    """Input ``i`` of ``node``, None when absent or empty (an optional input left out)."""
    return node.inputs[i] if i < len(node.inputs) and node.inputs[i].name else None


def other_input(node: gs.Node, t: gs.Tensor) -> gs.Tensor | None:
    """The other input of a binary node that reads ``t``."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    return b if a is t else a if b is t else None


def dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray:
    """``(q - zero) * scale`` in float64; per-channel scale/zero broadcast along ``axis`` of ``q``."""
    z = per_axis(zero, q.ndim, axis).astype(np.float64) if zero is not None else 0.0
    return (q.astype(np.float64) - z) * per_axis(scale, q.ndim, axis).astype(np.float64)


def upstream(out: gs.Tensor, stop: Sequence[gs.Tensor]) -> list[gs.Node] | None:
    """The nodes computing ``out`` from ``stop`` and constants, producers first; None when anything
    else (another variable) feeds in."""
    stop_names = {t.name for t in stop}
    seen: dict[int, gs.Node] = {}
    order: list[gs.Node] = []

    def visit(t: gs.Tensor) -> bool:
        if isinstance(t, gs.Constant) or t.name in stop_names or not t.name:
            return True
        p = producer(t)
        if p is None:
            return False
        if id(p) in seen:
            return True
        seen[id(p)] = p
        if not all(visit(i) for i in p.inputs):
            return False
        order.append(p)
        return True

    return order if visit(out) else None


def concrete(shape: Sequence[object] | None, fill: Sequence[int]) -> tuple[int, ...] | None:
    """``shape`` with unknown dims replaced by ``fill[axis]`` (None when the rank is unknown)."""
    if shape is None or len(shape) != len(fill):
        return None
    return tuple(d if isinstance(d, int) and d > 0 else f for d, f in zip(shape, fill))


def reads_through(node: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto], passes: Collection[str],
                  made_by: Callable[[onnx.NodeProto], bool]) -> bool:
    """Whether ``node``'s first input comes, through ops in ``passes`` only (first inputs, at most 16), from a
    node ``made_by`` accepts: how a rule settles a movement op ``check`` refuses for an integer tensor that
    the rule's rewrite turns into a float one."""
    name = node.input[0] if node.input else ""
    for _ in range(16):
        p = producer.get(name)
        if p is None or not p.input:
            return False
        if made_by(p):
            return True
        if p.op_type not in passes:
            return False
        name = p.input[0]
    return False
