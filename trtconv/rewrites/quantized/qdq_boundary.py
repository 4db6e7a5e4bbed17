"""``QuantizeLinear``/``DequantizeLinear`` TensorRT refuses -> what it takes.

TensorRT-RTX 1.7 (measured, tests/rewrites/test_quantized_static.py) refuses a
``DequantizeLinear`` of int32 ("input has type Int32 but must have type FP8, FP4, Int4, Int8, or
UInt8": the bias of ONNX Runtime's static QDQ models, and its 16-bit activations or weights
from ``QuantType.QInt16``/``QUInt16``) and any non-zero zero point ("Non-zero zero
point is not supported": uint8 activations, asymmetric int8). It takes int8 with zero point 0
(uint8 with zero point 0 too, but the parser's table and TensorRT 10 do not: uint8 is rewritten).

* ``DequantizeLinear`` of a constant it refuses (the int32 bias, an asymmetric weight) -> the
  float constant, computed as ONNX Runtime does (exact);
* ``DequantizeLinear`` of a tensor an earlier rewrite already made float (the QOperator rule's
  outputs, a rewritten ``QuantizeLinear``, directly or through pass-through ops) -> ``Identity`` (exact);
* ``QuantizeLinear`` of a constant (a QOperator model's 1/sqrt(d) or GELU constants) TensorRT
  refuses or a QOperator op reads -> the float constant its quantized value represents (exact);
* ``QuantizeLinear`` with a non-zero zero point -> ``Clip`` to the range it represents, in float:
  the rounding is dropped (at most half a step per value, the proof's bound), the saturation kept;
* ``QuantizeLinear`` int8 with zero point 0 feeding QOperator ops -> the same ``QuantizeLinear``
  and a ``DequantizeLinear`` (TensorRT's int8), so the consumers read float.

Anything else (int8 Q/DQ TensorRT takes, blocked quantization, float8) is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs
from onnx import helper

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof, bound_rtol, half_step
from trtconv.rewrites.quantized.graphs import (
    INT_RANGES,
    Original,
    const,
    dequantized,
    feeds_qoperator,
    float_frontier,
    float_root,
    given,
    is_float,
    per_axis,
)
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

PROOF_SHAPE = (2, 3, 4, 5)
# "must have type FP8, FP4, Int4, Int8, or UInt8" (TensorRT-RTX 1.7, measured: int32 bias, int16/uint16)
REFUSED_TYPES = frozenset(np.dtype(t) for t in (np.int32, np.int16, np.uint16, np.uint8))


def requantized(c: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int, lo: int, hi: int) -> np.ndarray:
    """QuantizeLinear of a constant: round half to even, add the zero point, saturate (int64)."""
    z = per_axis(zero, c.ndim, axis).astype(np.int64) if zero is not None else 0
    q = np.rint(c.astype(np.float32) / per_axis(scale, c.ndim, axis).astype(np.float32)).astype(np.int64) + z
    return np.clip(q, lo, hi)


@dataclass(frozen=True)
class QdqMatch:
    kind: str  # "constant" | "qconstant" | "identity" | "clip" | "int8"
    value: np.ndarray | None = None  # the float constant ("constant")
    bounds: tuple[float, float] = (0.0, 0.0)  # "clip": the represented range
    step: float = 0.0  # "clip": the quantization step (max scale)
    original: Original | None = None


def _zero(node: gs.Node) -> tuple[np.ndarray | None, bool]:
    """The zero point (None when absent) and whether it is a readable constant."""
    t = given(node, 2)
    if t is None:
        return None, True
    z = const(t)
    return z, z is not None


def _refused(q_dtype: np.dtype, zero: np.ndarray | None) -> bool:
    """int32, 16-bit, uint8 (the parser's table lists int8 only; 1.7 takes uint8 with a zero point 0,
    but TensorRT 10 does not), or a non-zero zero point."""
    return q_dtype in REFUSED_TYPES or (zero is not None and bool(np.any(zero != 0)))


class QdqRule(RewriteRule):
    name = "ort-qdq"
    description = ("QuantizeLinear/DequantizeLinear TensorRT refuses (int32 bias, non-zero zero points) -> float "
                   "constants, Identity or Clip")
    ops = (("", "DequantizeLinear"), ("", "QuantizeLinear"))

    def match(self, node: gs.Node, ctx: RuleContext) -> QdqMatch | None:
        if int(node.attrs.get("block_size", 0) or 0):
            return None
        zero, known = _zero(node)
        if not known:
            return None
        if node.op == "DequantizeLinear":
            x = node.inputs[0]
            q = const(x)
            if q is not None:
                scale = const(node.inputs[1])
                if scale is None or not _refused(q.dtype, zero):
                    return None
                return QdqMatch("constant", dequantized(q, scale, zero, int(node.attrs.get("axis", 1))),
                                original=Original.of([node]))
            # float already, or through pass-through ops (a Reshape) from a tensor an earlier rewrite made float
            return QdqMatch("identity") if is_float(x) or float_root(x) is not None else None
        y = node.outputs[0]
        scale = const(node.inputs[1])
        qtype = np.dtype(zero.dtype) if zero is not None else np.dtype(np.uint8)
        if scale is None or qtype not in INT_RANGES or y.name in ctx.graph_outputs:
            return None
        lo, hi = INT_RANGES[qtype]
        c = const(node.inputs[0])
        if c is not None and (_refused(qtype, zero) or feeds_qoperator(y)):
            axis = int(node.attrs.get("axis", 1))
            q = requantized(c, scale, zero, axis, lo, hi).astype(qtype)
            return QdqMatch("qconstant", dequantized(q, scale, zero, axis), original=Original.of([node]))
        if _refused(qtype, zero):
            z = zero.astype(np.float64) if zero is not None else np.zeros(())
            s = scale.astype(np.float64)
            return QdqMatch("clip", bounds=(float(np.min((lo - z) * s)), float(np.max((hi - z) * s))),
                            step=float(np.max(np.abs(s))), original=Original.of([node]))
        return QdqMatch("int8", original=Original.of([node])) if feeds_qoperator(y) else None

    def emit(self, ctx: RuleContext, site: Site, match: QdqMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        out = site.outputs[0]
        out.dtype = np.float32
        if match.kind in ("constant", "qconstant"):
            assert match.value is not None
            em.node("Constant", "value", [], [out], {"value": gs.Constant(f"{site.name}/value", match.value)})
            return Emitted(tuple(em.nodes), "Constant (float)" if match.kind == "constant"
                           else "Constant (float: the value the quantized constant represents)")
        if match.kind == "identity":
            em.node("Identity", "identity", [site.inputs[0]], [out])
            return Emitted(tuple(em.nodes), "Identity (input already float)")
        if match.kind == "clip":
            # the whole-graph proof is cut where the value is float in both models: after its DequantizeLinear
            cuts = float_frontier(out)
            lo, hi = match.bounds
            em.node("Clip", "clip", [site.inputs[0], em.const("min", np.array(lo, np.float32)),
                                     em.const("max", np.array(hi, np.float32))], [out])
            return Emitted(tuple(em.nodes), "Clip (float; rounding dropped)",
                           ("a zero point TensorRT refuses: the value is kept in float, clipped to the range the "
                            "original represents; its rounding (at most half a step) is dropped",),
                           graph_cuts=cuts, exact=False)
        q = em.var("quantized")
        em.node("QuantizeLinear", "quantize", list(site.inputs), [q])
        em.node("DequantizeLinear", "dequantize", [q, *site.inputs[1:]], [out])
        return Emitted(tuple(em.nodes), "QuantizeLinear+DequantizeLinear (int8)")

    def proof_case(self, ctx: RuleContext, site: Site, match: QdqMatch, emitted: Emitted) -> NodeProofCase | Proof:
        out = site.outputs[0].name
        if match.kind == "identity":
            x = np.random.default_rng(ctx.settings.seed + site.index).standard_normal(PROOF_SHAPE).astype(np.float32)
            return NodeProofCase(emitted.nodes, out, {site.inputs[0].name: x}, x.astype(np.float64),
                                 np.dtype(np.float32), ctx.opset, shapes={"x": x.shape})
        assert match.original is not None
        opset = max(ctx.opset, 13)
        if match.kind == "qconstant":  # a QuantizeLinear of a constant: what its quantized value represents
            node = match.original.nodes[0]
            zero = match.original.constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            qy = match.original.run({}, out, opset, helper.np_dtype_to_tensor_dtype(
                zero.dtype if zero is not None else np.dtype(np.uint8)))
            ref = dequantized(qy, match.original.constants[node.input[1]], zero,
                              int(next((a.i for a in node.attribute if a.name == "axis"), 1)))
            return NodeProofCase(emitted.nodes, out, {}, ref.astype(np.float64), np.dtype(np.float32), opset)
        if match.kind == "constant":
            ref = match.original.run({}, out, opset)
            return NodeProofCase(emitted.nodes, out, {}, ref.astype(np.float64), np.dtype(np.float32), opset)
        x_t = site.inputs[0]
        shape = tuple(d if isinstance(d, int) and d > 0 else 4 for d in (ctx.shapes.get(x_t.name) or PROOF_SHAPE))
        lo, hi = match.bounds
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        span = hi - lo
        x = rng.uniform(lo - 0.25 * span, hi + 0.25 * span, shape).astype(np.float32)  # saturation included
        node = match.original.nodes[0]
        scale = match.original.constants[node.input[1]]
        zero = match.original.constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        qtype = helper.np_dtype_to_tensor_dtype(zero.dtype if zero is not None else np.dtype(np.uint8))
        qy = match.original.run({x_t.name: x}, out, opset, qtype)
        ref = dequantized(qy, scale, zero, int(next((a.i for a in node.attribute if a.name == "axis"), 1)))
        if match.kind == "int8":
            return NodeProofCase(emitted.nodes, out, {x_t.name: x}, ref.astype(np.float64), np.dtype(np.float32),
                                 opset, shapes={"x": shape})
        rtol = bound_rtol(half_step(match.step), ref, ctx.settings.node_tolerance)
        return NodeProofCase(emitted.nodes, out, {x_t.name: x}, ref.astype(np.float64), np.dtype(np.float32), opset,
                             rtol=rtol, shapes={"x": shape})
