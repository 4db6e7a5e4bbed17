"""``DynamicQuantizeLinear`` + ``com.microsoft::QAttention`` -> the standard-ONNX attention of
:mod:`trtconv.rewrites.transformer.attention` on dequantized Q/K/V weights.

What ``quantize_dynamic`` makes of the ``com.microsoft::Attention`` ONNX Runtime's transformer
optimizer fuses (BERT, DistilBERT, RoBERTa, ViT, ...). TensorRT has neither op. The replacement
reads the activation before ``DynamicQuantizeLinear`` quantized it, so, like the other dynamic
rules, it drops the per-call uint8 activation rounding: the report gives the whole model's
measured drift. The node proof is tight anyway: it feeds the original an activation that lies on
``DynamicQuantizeLinear``'s own grid (its range spans exactly 255 steps of a power of two), where
that rounding is lossless, so the original and the replacement must agree to float32 precision.

Ops: ``com.microsoft::QAttention`` (its ``DynamicQuantizeLinear`` is read with it, and dead once
its consumers are rewritten); opsets: those of the attention form (>= 13); targets: all
(no TensorRT imports QAttention). Declined with the reason: what ``ms-attention`` declines (past
state, rotary, 4-D masks, ...), an input not quantized by a ``DynamicQuantizeLinear``,
non-constant weights or scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.quantized.graphs import (
    MS_DOMAIN,
    Original,
    concrete,
    const,
    dequantize,
    given,
    producer,
)
from trtconv.rewrites.rule import Emitted, NodeView, RewriteRule, RuleContext, Site
from trtconv.rewrites.transformer.attention import AttentionRule, mask_feed
from trtconv.rewrites.transformer.std_forms import MIN_OPSET, Ops

# QAttention's inputs: input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point,
# weight_zero_point, past
X, W, BIAS, X_SCALE, W_SCALE, Q_MASK, X_ZERO, W_ZERO, PAST = range(9)
FLOAT_LAYOUT = (X, W, BIAS, Q_MASK, PAST)  # Attention's input, weights, bias, mask_index, past
GRID = 2.0 ** -6  # the proof's activation step: a power of two, so the grid is exact in float32
PROOF_SEQ = 8
ATTENTION = AttentionRule()
DROPPED = ("the per-call uint8 activation quantization (DynamicQuantizeLinear) is dropped: the original's own "
           "quantization noise is what changes (node proof: on an activation that rounding leaves exact, equal to "
           "float32 precision)")


def float_view(view: NodeView) -> NodeView:
    """The QAttention node seen as the float ``Attention`` it stands for (inputs renumbered)."""
    names = tuple(view.inputs[i] if view.has_input(i) else "" for i in FLOAT_LAYOUT)
    return NodeView("Attention", MS_DOMAIN, view.attrs, names, view.outputs, view.opset, view.shapes, view.partial)


@dataclass(frozen=True)
class QAttentionMatch:
    x: gs.Tensor  # the float activation DynamicQuantizeLinear quantized
    weight: np.ndarray  # (input_hidden, 3 * hidden), dequantized, float32
    bias: gs.Tensor | None
    mask: gs.Tensor | None
    view: NodeView  # as the float Attention
    original: Original  # DynamicQuantizeLinear + QAttention


def _read(node: gs.Node, ctx: RuleContext) -> QAttentionMatch | None:
    dql = producer(node.inputs[X])
    if dql is None or dql.op != "DynamicQuantizeLinear" or dql.outputs[0] is not node.inputs[X] \
            or given(node, X_SCALE) is not dql.outputs[1] \
            or (given(node, X_ZERO) is not None and given(node, X_ZERO) is not dql.outputs[2]):
        return None
    wq, w_scale = const(given(node, W)), const(given(node, W_SCALE))
    w_zero = const(given(node, W_ZERO)) if given(node, W_ZERO) is not None else np.zeros((), np.int8)
    bias = given(node, BIAS)
    if wq is None or wq.ndim != 2 or w_scale is None or w_zero is None or w_scale.size not in (1, wq.shape[1]) \
            or w_zero.size not in (1, wq.shape[1]) or (bias is not None and const(bias) is None):
        return None
    weight = dequantize(wq, w_scale, w_zero, 1).astype(np.float32)
    x = dql.inputs[0]
    mask = given(node, Q_MASK)
    shapes: dict[str, Any] = dict(ctx.shapes)
    shapes[node.inputs[W].name] = list(weight.shape)
    view = float_view(NodeView.of_gs(node, ctx.opset, ctx.graph_outputs, shapes))
    if ATTENTION.refusal(view) is not None:
        return None
    return QAttentionMatch(x, weight, bias, mask, view, Original.of([dql, node]))


class QAttentionRule(RewriteRule):
    name = "ort-qattention"
    description = ("DynamicQuantizeLinear + com.microsoft::QAttention (dynamic quantization of a fused Attention) -> "
                   "MatMul projections on dequantized weights + MatMul-Softmax-MatMul")
    ops = ((MS_DOMAIN, "QAttention"),)
    opsets = (MIN_OPSET, ATTENTION.opsets[1])

    def refusal(self, view: NodeView) -> str | None:
        return ATTENTION.refusal(float_view(view))

    def match(self, node: gs.Node, ctx: RuleContext) -> QAttentionMatch | None:
        return _read(node, ctx)

    def emit(self, ctx: RuleContext, site: Site, match: QAttentionMatch) -> Emitted:
        out = site.outputs[0]
        out.dtype = np.float32
        shapes = ATTENTION.output_shapes(match.view)
        if shapes[0] is not None and out.shape is None:
            out.shape = shapes[0]
        o = Ops(Emitter(ctx.graph, site.name), ctx.opset, np.float32)
        weight = gs.Constant(f"{site.name}/weight", match.weight)
        ins = [match.x, weight, match.bias, match.mask]
        target = ATTENTION.write(o, match.view, ins, [out])
        return Emitted(tuple(o.em.nodes), f"{target} (dequantized weights)", (DROPPED,),
                       graph_cuts=frozenset({out.name}), exact=False)

    def proof_case(self, ctx: RuleContext, site: Site, match: QAttentionMatch,
                   emitted: Emitted) -> NodeProofCase | Proof:
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        shape = concrete(ctx.shapes.get(match.x.name), (1, PROOF_SEQ, match.weight.shape[0])) or \
            (1, PROOF_SEQ, match.weight.shape[0])
        steps = rng.integers(-128, 128, shape)
        steps.flat[0], steps.flat[-1] = -128, 127  # the range spans exactly 255 steps: zero point 128, scale GRID
        x = (steps * GRID).astype(np.float32)
        feeds = {match.x.name: x}
        if match.mask is not None:
            m_shape = concrete(ctx.shapes.get(match.mask.name), (shape[0], shape[1], shape[1])) or (shape[0],)
            dtype = np.dtype(match.mask.dtype) if match.mask.dtype is not None else np.dtype(np.int32)
            feeds[match.mask.name] = mask_feed(tuple(m_shape), shape[1], rng, dtype)
        out = site.outputs[0].name
        expected = match.original.run(feeds, out, max(ctx.opset, 11))
        return NodeProofCase(emitted.nodes, out, feeds, expected.astype(np.float64), np.dtype(np.float32), ctx.opset,
                             rtol=max(ctx.settings.node_tolerance, 1e-5),
                             shapes={"x": shape, **({"mask": feeds[match.mask.name].shape} if match.mask else {})})
