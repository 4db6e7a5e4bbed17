"""``DynamicQuantizeLinear`` + ``ConvInteger``/``MatMulInteger`` + the Cast and Mul tail ONNX
Runtime's ``quantize_dynamic`` emits -> one float ``Conv``/``MatMul`` on dequantized weights.

TensorRT has no importer for the integer ops, and the per-call uint8 activation quantization has
no TensorRT form. The float op reads the activation before it was quantized, so the result
differs from the original by the original's own activation rounding: at most
``scale/2 * max_j sum_k |W[j, k]|`` per output (``scale = range(x)/255``, DynamicQuantizeLinear's
own), plus one bias step where the older quantizer rounded the bias to int32 (``Floor``). The
node proof checks that bound on ONNX Runtime's run of the original pattern; the report also
gives the whole model's measured drift.

Data movement on the uint8 activation between the two (``DynamicQuantizeLinear -> Transpose ->
MatMulInteger``, as quantizers that move 8-bit tensors write it) commutes with a per-tensor
quantization: the replacement moves the float activation the same way, so no integer Transpose
is left for a parser that refuses one (issue 33).

Both tails are read: ``int -> Cast -> Mul(x_scale*w_scale)`` (current ORT) and
``int -> Add(int32 bias = Floor(bias / (x_scale*w_scale))) -> Cast -> Mul`` (older ORT, as in
ddddocr's ``common_old.onnx``). Anything else is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof, bound_rtol
from trtconv.rewrites.quantized.graphs import (
    Original,
    concrete,
    const,
    dequantize,
    given,
    matmul_bias,
    other_input,
    producer,
    reads_through,
    sole_consumer,
    upstream,
)
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site, detach

CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
BIAS_PATH = ("Reshape", "Cast", "Floor", "Round", "Unsqueeze", "Squeeze", "Flatten")
# Ops that only move elements: on a per-tensor quantized activation they commute with the quantization.
MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
PROOF_SIDE = 16  # unknown spatial dims in a proof
DROPPED = ("the per-call uint8 activation quantization (DynamicQuantizeLinear) is dropped: the original's own "
           "quantization noise is what changes (node proof: measured error within its rounding bound)")


@dataclass(frozen=True)
class DynamicMatch:
    conv: bool  # ConvInteger (else MatMulInteger)
    x: gs.Tensor  # the float activation DynamicQuantizeLinear quantized
    weight: np.ndarray  # dequantized, float32
    bias: np.ndarray | None  # the float bias of the int32 bias path (older quantizer)
    bias_step: float  # max weight scale: the bias path rounds to x_scale * this
    attrs: dict[str, Any]
    moves: tuple[gs.Node, ...]  # Transpose/Reshape/... between DynamicQuantizeLinear and the integer op, in order
    tail: tuple[gs.Node, ...]  # the Add/Cast/Mul after the integer op: absorbed
    final: gs.Tensor  # what the tail's Mul wrote: the replacement writes it
    original: Original


def _int_bias(t: gs.Tensor) -> np.ndarray | None:
    """The float bias an older quantizer's int32 bias path starts from: ``Floor(bias / scale)``."""
    p = producer(t)
    while p is not None and p.op in BIAS_PATH:
        p = producer(p.inputs[0])
    return const(p.inputs[0]) if p is not None and p.op == "Div" else None


def _weight_scale(s: gs.Tensor, x_scale: gs.Tensor) -> np.ndarray | None:
    """``w_scale`` of the tail's ``Mul(x_scale, w_scale)``."""
    p = producer(s)
    if p is None or p.op != "Mul" or len(p.inputs) != 2:
        return None
    other = other_input(p, x_scale)
    return const(other) if other is not None else None


def _moves(t: gs.Tensor, outs: frozenset[str]) -> tuple[gs.Node | None, tuple[gs.Node, ...]]:
    """The node that quantized ``t`` and the movement ops between them (each read by the next alone)."""
    moves: list[gs.Node] = []
    p = producer(t)
    while p is not None and p.op in MOVES and sole_consumer(t, outs) is not None:
        moves.insert(0, p)
        t = p.inputs[0]
        p = producer(t)
    if p is not None and p.op == "DynamicQuantizeLinear" and p.outputs[0] is t and (
            not moves or sole_consumer(t, outs) is moves[0]):
        return p, tuple(moves)
    return None, ()


def _read(node: gs.Node, ctx: RuleContext) -> DynamicMatch | None:
    outs = ctx.graph_outputs
    dql, moves = _moves(node.inputs[0], outs)
    if dql is None:
        return None
    a_zero = given(node, 2)
    if a_zero is not None and a_zero is not dql.outputs[2]:
        return None
    wq = const(given(node, 1))
    w_zero = const(given(node, 3)) if given(node, 3) is not None else np.zeros((), np.int32)
    if wq is None or w_zero is None:
        return None
    tail: list[gs.Node] = []
    cur = node.outputs[0]
    nxt = sole_consumer(cur, outs)
    bias = None
    if nxt is not None and nxt.op == "Add":
        other = other_input(nxt, cur)
        bias = _int_bias(other) if other is not None else None
        if bias is None:
            return None
        tail.append(nxt)
        cur = nxt.outputs[0]
        nxt = sole_consumer(cur, outs)
    if nxt is None or nxt.op != "Cast" or int(nxt.attrs.get("to", 0)) != 1:
        return None
    tail.append(nxt)
    cur = nxt.outputs[0]
    mul = sole_consumer(cur, outs)
    scale_t = other_input(mul, cur) if mul is not None and mul.op == "Mul" else None
    w_scale = _weight_scale(scale_t, dql.outputs[1]) if scale_t is not None else None
    if mul is None or w_scale is None:
        return None
    tail.append(mul)
    final = mul.outputs[0]
    conv = node.op == "ConvInteger"
    if (not conv and wq.ndim != 2) or (conv and wq.ndim < 3):
        return None
    axis = 0 if conv else 1
    chans = wq.shape[axis]
    if w_scale.size not in (1, chans) or w_zero.size not in (1, chans):
        return None
    original = upstream(final, [dql.inputs[0]])
    if original is None:
        return None
    weight = dequantize(wq, w_scale, w_zero, axis).astype(np.float32)
    attrs = {k: v for k, v in node.attrs.items() if k in CONV_ATTRS} if conv else {}
    return DynamicMatch(conv, dql.inputs[0], weight, None if bias is None else bias.astype(np.float32).reshape(-1),
                        float(np.abs(w_scale).max()), attrs, moves, tuple(tail), final, Original.of(original))


class DynamicIntegerRule(RewriteRule):
    name = "ort-dynamic-integer"
    description = ("DynamicQuantizeLinear + ConvInteger/MatMulInteger (ONNX Runtime dynamic quantization) -> "
                   "float Conv/MatMul on dequantized weights")
    ops = (("", "ConvInteger"), ("", "MatMulInteger"), ("", "DynamicQuantizeLinear"))

    def settles(self, node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                producer: Mapping[str, onnx.NodeProto]) -> bool:
        """A movement op ``check`` refuses for the uint8 activation DynamicQuantizeLinear made: the
        replacement moves the float activation instead."""
        if node.op_type not in MOVES or not all(r == "dtype" and "INT8" in m for r, m in errors):
            return False
        return reads_through(node, producer, MOVES, lambda p: p.op_type == "DynamicQuantizeLinear")

    def match(self, node: gs.Node, ctx: RuleContext) -> DynamicMatch | None:
        if node.op == "DynamicQuantizeLinear":
            return None  # read from its consumers; dead once they are rewritten
        return _read(node, ctx)

    def emit(self, ctx: RuleContext, site: Site, match: DynamicMatch) -> Emitted:
        detach(match.tail)
        em = Emitter(ctx.graph, site.name)
        w = em.const("weight", match.weight)
        final = match.final
        final.dtype = np.float32
        x = match.x
        for i, move in enumerate(match.moves):  # the same movement, on the float activation
            moved = em.var(f"moved{i}", np.float32)
            em.node(move.op, f"move{i}", [x, *move.inputs[1:]], [moved], move.attrs)
            x = moved
        if match.conv:
            inputs: list[gs.Tensor] = [x, w] + ([em.const("bias", match.bias)] if match.bias is not None else [])
            em.node("Conv", "conv", inputs, [final], match.attrs)
            target = "Conv"
        else:
            target = matmul_bias(em, x, w, match.bias, final)
        return Emitted(tuple(em.nodes), f"{target} (dequantized weights)", (DROPPED,),
                       graph_cuts=frozenset({final.name}), absorbed=match.tail, exact=False)

    def proof_case(self, ctx: RuleContext, site: Site, match: DynamicMatch, emitted: Emitted) -> NodeProofCase | Proof:
        w = match.weight
        known = ctx.shapes.get(match.x.name)
        if match.moves and not (known and all(isinstance(d, int) and d > 0 for d in known)):
            return Proof("none", False, reason=f"the shape of {match.x.name!r} is unknown, so the moved activation "
                                               "cannot be drawn (give --shapes, or --no-verify)")
        rank = len(ctx.shapes.get(match.x.name) or ()) or (w.ndim if match.conv else 2)
        if match.conv:
            group = int(match.attrs.get("group", 1))
            fill = [1, w.shape[1] * group] + [max(PROOF_SIDE, 2 * k) for k in w.shape[2:]]
        else:
            fill = [2] * (rank - 1) + [w.shape[0]]
        shape = tuple(known) if match.moves and known else concrete(known, fill) or tuple(fill)  # type: ignore[arg-type]
        x = np.random.default_rng(ctx.settings.seed + site.index).standard_normal(shape).astype(np.float32)
        expected = match.original.run({match.x.name: x}, match.final.name, max(ctx.opset, 11))
        step = (max(0.0, float(x.max())) - min(0.0, float(x.min()))) / 255.0  # DynamicQuantizeLinear's scale
        l1 = np.abs(w.astype(np.float64)).reshape(w.shape[0], -1).sum(axis=1) if match.conv else \
            np.abs(w.astype(np.float64)).sum(axis=0)
        bound = step / 2 * float(l1.max()) + (step * match.bias_step if match.bias is not None else 0.0)
        rtol = bound_rtol(bound, expected, ctx.settings.node_tolerance)
        return NodeProofCase(emitted.nodes, match.final.name, {match.x.name: x}, expected.astype(np.float64),
                             np.dtype(np.float32), ctx.opset, rtol=rtol, shapes={"x": shape})
