"""ONNX Runtime's QOperator ops -> the float op between dequantized inputs and a requantized output.

``QLinearConv``, ``QLinearMatMul`` and ``com.microsoft`` ``QGemm``, ``QLinearAdd``,
``QLinearMul``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearGlobalAveragePool``,
``QLinearAveragePool``, ``QLinearConcat``, ``QLinearSoftmax`` (a QOperator BERT's attention scores):
TensorRT imports none of them. Each becomes its
float op. Quantized activations arrive float (the ``QuantizeLinear`` that made them, and the
QOperator op before, are rewritten first: :mod:`.qdq_boundary`, this module); constant inputs are
dequantized once, except symmetric int8 weights, which stay int8 behind a ``DequantizeLinear``
(TensorRT's int8 weights); the int32 bias becomes float (``bias * x_scale * w_scale``).
The output is requantized as TensorRT takes it: int8 with zero point 0 -> ``QuantizeLinear`` +
``DequantizeLinear``; anything else (uint8, asymmetric) -> ``Clip`` to the range it represents,
in float, its rounding dropped. The node proof runs the original op in ONNX Runtime on random
quantized inputs and holds the replacement to one output step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof, bound_rtol
from trtconv.rewrites.quantized.graphs import (
    INT_RANGES,
    MS_DOMAIN,
    PASSTHROUGH,
    QOPERATOR_OPS,
    Original,
    const,
    dequantized,
    float_frontier,
    float_root,
    given,
    reads_through,
)
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
PROOF_SIDE = 8


@dataclass(frozen=True)
class QOp:
    """Where a QOperator op keeps its quantized inputs and output, and the float op it stands for."""

    float_op: str
    triplets: Callable[[int], Sequence[int]]  # (number of inputs) -> positions of (x, scale, zero) triplets
    out: tuple[int, int] | None  # positions of (y_scale, y_zero); None: no output quantization
    attrs: tuple[str, ...] = ()
    weight: int | None = None  # the triplet whose constant int8 symmetric value stays int8 (Conv/MatMul weights)
    weight_axis: int = 0  # its per-channel axis
    bias: int | None = None  # the int32 bias (scale x_scale * w_scale)


def _pair(n: int) -> Sequence[int]:
    return (0, 3)


def _one(n: int) -> Sequence[int]:
    return (0,)


OPS: dict[tuple[str, str], QOp] = {
    ("", "QLinearConv"): QOp("Conv", _pair, (6, 7), CONV_ATTRS, weight=1, weight_axis=0, bias=8),
    ("", "QLinearMatMul"): QOp("MatMul", _pair, (6, 7), weight=1, weight_axis=-1),
    (MS_DOMAIN, "QGemm"): QOp("Gemm", _pair, (7, 8), ("alpha", "transA", "transB"), weight=1, weight_axis=-1,
                              bias=6),
    (MS_DOMAIN, "QLinearAdd"): QOp("Add", _pair, (6, 7)),
    (MS_DOMAIN, "QLinearMul"): QOp("Mul", _pair, (6, 7)),
    (MS_DOMAIN, "QLinearSigmoid"): QOp("Sigmoid", _one, (3, 4)),
    (MS_DOMAIN, "QLinearLeakyRelu"): QOp("LeakyRelu", _one, (3, 4), ("alpha",)),
    (MS_DOMAIN, "QLinearGlobalAveragePool"): QOp("GlobalAveragePool", _one, (3, 4)),
    (MS_DOMAIN, "QLinearAveragePool"): QOp("AveragePool", _one, (3, 4), POOL_ATTRS),
    (MS_DOMAIN, "QLinearConcat"): QOp("Concat", lambda n: tuple(range(2, n, 3)), (0, 1), ("axis",)),
    # its ``opset`` attribute: the Softmax semantics (before 13, over the flattened trailing axes)
    (MS_DOMAIN, "QLinearSoftmax"): QOp("Softmax", _one, (3, 4), ("axis",)),
}


@dataclass(frozen=True)
class Operand:
    """One quantized input: a float tensor by now, or a constant (its value, scale and zero point)."""

    tensor: gs.Tensor | None  # float activation
    q: np.ndarray | None  # constant quantized value
    scale: np.ndarray
    zero: np.ndarray | None
    keep_int8: bool  # stays int8 behind a DequantizeLinear
    axis: int


@dataclass(frozen=True)
class QMatch:
    spec: QOp
    operands: tuple[Operand, ...]
    bias: np.ndarray | None  # float bias
    y_scale: np.ndarray | None
    y_zero: np.ndarray | None
    attrs: dict[str, Any]
    original: Original


def _scale_zero(node: gs.Node, i: int) -> tuple[np.ndarray, np.ndarray | None] | None:
    s = const(given(node, i + 1))
    z_t = given(node, i + 2)
    z = const(z_t) if z_t is not None else None
    if s is None or (z_t is not None and z is None):
        return None
    return s, z


def _operand(node: gs.Node, i: int, spec: QOp) -> Operand | None:
    sz = _scale_zero(node, i)
    x = given(node, i)
    if sz is None or x is None:
        return None
    s, z = sz
    q = const(x)
    if q is None:
        root = float_root(x)
        return None if root is None else Operand(x, None, s, z, False, 0)
    if q.dtype not in INT_RANGES:
        return None
    axis = spec.weight_axis if i == 3 and spec.weight == 1 else 0
    if i == 3 and spec.float_op == "Gemm" and int(node.attrs.get("transB", 0)):
        axis = 0  # B is [N, K]: its per-channel scales run along N, axis 0
    keep = i == 3 and spec.weight == 1 and q.dtype == np.int8 and (z is None or not np.any(z))
    return Operand(None, q, s, z, keep, axis)


def _read(node: gs.Node, ctx: RuleContext, spec: QOp) -> QMatch | None:
    operands = []
    for i in spec.triplets(len(node.inputs)):
        op = _operand(node, i, spec)
        if op is None:
            return None
        operands.append(op)
    y_scale = y_zero = None
    if spec.out is not None and given(node, spec.out[0]) is not None:
        sz = _scale_zero(node, spec.out[0] - 1)
        if sz is None or node.outputs[0].name in ctx.graph_outputs:
            return None
        y_scale, y_zero = sz
        if y_zero is not None and y_zero.dtype not in INT_RANGES:
            return None
    bias = None
    if spec.bias is not None and given(node, spec.bias) is not None:
        b = const(given(node, spec.bias))
        if b is None:
            return None
        w = operands[1]
        w_scale = np.asarray(w.scale, np.float32).reshape(-1)
        bias = (b.astype(np.float32) * np.float32(operands[0].scale) * w_scale).astype(np.float32)
    if node.attrs.get("channels_last", 0) or not _same_softmax(node, ctx):
        return None
    attrs = {k: v for k, v in node.attrs.items() if k in spec.attrs}
    return QMatch(spec, tuple(operands), bias, y_scale, y_zero, attrs, Original.of([node]))


def _same_softmax(node: gs.Node, ctx: RuleContext) -> bool:
    """Softmax before opset 13 (QLinearSoftmax's ``opset`` attribute, or the model's, which the
    emitted Softmax follows) runs over the flattened trailing axes: the same as 13+ over the last axis only."""
    if node.op != "QLinearSoftmax":
        return True
    axis = int(node.attrs.get("axis", -1 if int(node.attrs.get("opset", 13)) >= 13 else 1))
    rank = len(ctx.shapes.get(node.inputs[0].name) or ())
    return axis == -1 or (rank > 0 and axis == rank - 1) or min(int(node.attrs.get("opset", 13)), ctx.opset) >= 13


def _emit_operand(em: Emitter, k: int, op: Operand) -> gs.Tensor:
    if op.tensor is not None:
        return op.tensor
    assert op.q is not None
    if op.keep_int8:
        out = em.var(f"w{k}", dtype=np.float32)
        attrs = {"axis": op.axis} if np.asarray(op.scale).size > 1 else {}
        em.node("DequantizeLinear", f"dequantize{k}", [em.const(f"q{k}", op.q),
                                                        em.const(f"scale{k}", np.asarray(op.scale, np.float32))],
                [out], attrs)
        return out
    return em.const(f"x{k}", dequantized(op.q, op.scale, op.zero, op.axis))


def _bounds(scale: np.ndarray, zero: np.ndarray | None) -> tuple[float, float]:
    lo, hi = INT_RANGES[np.dtype(zero.dtype) if zero is not None else np.dtype(np.uint8)]
    z = 0.0 if zero is None else float(zero.reshape(-1)[0])
    s = float(np.asarray(scale).reshape(-1)[0])
    return (lo - z) * s, (hi - z) * s


class QOperatorRule(RewriteRule):
    name = "ort-qoperator"
    description = "ONNX Runtime QOperator ops (QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ...) -> float ops"
    ops = tuple(OPS)

    def settles(self, node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                producer: Mapping[str, onnx.NodeProto]) -> bool:
        """A pass-through op (Flatten, ...) ``check`` refuses for the (u)int8 tensor a QOperator op or a
        QuantizeLinear made: it reads float once they are rewritten."""
        if node.op_type not in PASSTHROUGH or not all(r == "dtype" and "INT8" in m for r, m in errors):
            return False
        return reads_through(node, producer, PASSTHROUGH,
                             lambda p: (p.domain or "", p.op_type) in QOPERATOR_OPS or p.op_type == "QuantizeLinear")

    def match(self, node: gs.Node, ctx: RuleContext) -> QMatch | None:
        spec = OPS.get((node.domain or "", node.op))
        return _read(node, ctx, spec) if spec is not None else None

    def emit(self, ctx: RuleContext, site: Site, match: QMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        out = site.outputs[0]
        ins = [_emit_operand(em, k, op) for k, op in enumerate(match.operands)]
        if match.bias is not None:
            ins.append(em.const("bias", match.bias))
        out.dtype = np.float32
        if match.y_scale is None:  # QGemm without output quantization: float out
            em.node(match.spec.float_op, "op", ins, [out], match.attrs)
            return Emitted(tuple(em.nodes), match.spec.float_op)
        y = em.var("float", dtype=np.float32)
        em.node(match.spec.float_op, "op", ins, [y], match.attrs)
        zero = match.y_zero
        if zero is not None and zero.dtype == np.int8 and not np.any(zero):
            q = em.var("quantized")
            scale = em.const("y_scale", np.asarray(match.y_scale, np.float32))
            zero_t = em.const("y_zero", zero)
            em.node("QuantizeLinear", "quantize", [y, scale, zero_t], [q])
            em.node("DequantizeLinear", "dequantize", [q, scale, zero_t], [out])
            target = f"{match.spec.float_op}+QuantizeLinear+DequantizeLinear (int8)"
            notes: tuple[str, ...] = ()
        else:
            lo, hi = _bounds(match.y_scale, zero)
            em.node("Clip", "clip", [y, em.const("min", np.array(lo, np.float32)),
                                     em.const("max", np.array(hi, np.float32))], [out])
            target = f"{match.spec.float_op}+Clip (float)"
            notes = ("output quantization TensorRT refuses (uint8 or a non-zero zero point): kept in float, clipped "
                     "to the range it represents; its rounding (at most half a step) is dropped",)
        return Emitted(tuple(em.nodes), target, notes, graph_cuts=float_frontier(out), exact=False)

    def proof_case(self, ctx: RuleContext, site: Site, match: QMatch, emitted: Emitted) -> NodeProofCase | Proof:
        return _proof(ctx, site, match, emitted)


def _known_shape(ctx: RuleContext, op: Operand) -> tuple[int, ...] | None:
    """A variable operand's inferred shape, unknown dims made concrete (None when its rank is unknown)."""
    known = ctx.shapes.get(op.tensor.name) if op.tensor is not None else None
    if not known:
        return None
    return tuple(d if isinstance(d, int) and d > 0 else (1 if i == 0 else PROOF_SIDE) for i, d in enumerate(known))


def _proof_shape(ctx: RuleContext, match: QMatch) -> tuple[int, ...]:
    """One shape for every variable operand (elementwise ops and Concat need them alike): the first
    known one, else one the weights imply."""
    for op in match.operands:
        known = _known_shape(ctx, op)
        if known:
            return known
    w = next((op.q for op in match.operands if op.q is not None), None)
    if match.spec.float_op in ("Add", "Mul") and w is not None and w.ndim:
        return tuple(w.shape)  # an elementwise op with a constant operand (folded position embeddings): its shape
    if match.spec.float_op == "Conv" and w is not None:
        return (1, w.shape[1] * int(match.attrs.get("group", 1))) + (PROOF_SIDE,) * (w.ndim - 2)
    if match.spec.float_op in ("MatMul", "Gemm") and w is not None:
        k = w.shape[1] if match.attrs.get("transB", 0) else w.shape[0]
        return (k, 2) if match.attrs.get("transA", 0) else (2, k)
    return (1, 4, PROOF_SIDE, PROOF_SIDE)


def _operand_shapes(ctx: RuleContext, match: QMatch) -> list[tuple[int, ...]]:
    """Each operand's proof shape: its own where known (broadcasting Add/Mul), else the shared one; a
    MatMul of two activations (attention's Q.K^T) whose one shape is unknown takes the other's, its
    last two dims swapped."""
    shared = _proof_shape(ctx, match)
    own = [_known_shape(ctx, op) for op in match.operands]
    if match.spec.float_op == "MatMul" and len(own) == 2 and all(op.tensor is not None for op in match.operands):
        a, b = own
        if a is not None and b is None and len(a) >= 2:
            own[1] = a[:-2] + (a[-1], a[-2])
        elif b is not None and a is None and len(b) >= 2:
            own[0] = b[:-2] + (b[-1], b[-2])
    return [s if s is not None else shared for s in own]


def _proof(ctx: RuleContext, site: Site, match: QMatch, emitted: Emitted) -> NodeProofCase | Proof:
    rng = np.random.default_rng(ctx.settings.seed + site.index)
    node = match.original.nodes[0]
    quantized: dict[str, np.ndarray] = {}
    floats: dict[str, np.ndarray] = {}
    shapes = _operand_shapes(ctx, match)
    for k, op, shape in zip(match.spec.triplets(len(node.input)), match.operands, shapes):
        if op.tensor is None:
            continue
        qtype = np.dtype(op.zero.dtype) if op.zero is not None else np.dtype(np.uint8)
        lo, hi = INT_RANGES[qtype]
        q = rng.integers(lo, hi + 1, shape).astype(qtype)
        quantized[node.input[k]] = q
        floats[op.tensor.name] = dequantized(q, op.scale, op.zero, 0)
    out = site.outputs[0].name
    if match.y_scale is None:
        otype = helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))
    else:
        otype = helper.np_dtype_to_tensor_dtype(np.dtype(match.y_zero.dtype) if match.y_zero is not None
                                                else np.dtype(np.uint8))
    opset = max(ctx.opset, 13)
    got = match.original.run(quantized, node.output[0], opset, otype)
    if match.y_scale is None:
        ref, step = got.astype(np.float64), 0.0
    else:
        ref = dequantized(got, match.y_scale, match.y_zero, 0).astype(np.float64)
        step = float(np.abs(match.y_scale).max())
    rtol = bound_rtol(step, ref, max(ctx.settings.node_tolerance, 1e-5))
    return NodeProofCase(emitted.nodes, out, floats, ref, np.dtype(np.float32), opset, rtol=rtol,
                         shapes={k: tuple(v.shape) for k, v in quantized.items()})
