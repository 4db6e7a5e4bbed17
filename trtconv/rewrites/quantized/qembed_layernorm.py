"""``com.microsoft::QEmbedLayerNormalization`` -> the standard-ONNX embedding of
:mod:`trtconv.rewrites.transformer.embed_layernorm` (Gathers, Adds, LayerNormalization) on the
dequantized tables.

What ONNX Runtime's quantizers (dynamic and QOperator) make of the ``EmbedLayerNormalization``
its transformer optimizer fuses: the word, position and segment tables and LayerNorm's gamma and
beta held as uint8/int8 with a scale and zero point each. Its output is float, so nothing but
the tables changes: they are dequantized once, as ONNX Runtime's kernel does, and the node
becomes what ``ms-embed-layernorm`` makes of the float op (the same numbers). The node proof runs
the original in ONNX Runtime on seeded token ids and compares the normalized embedding.

Ops: ``com.microsoft::QEmbedLayerNormalization``; opsets: those of the embedding form; targets:
all. Declined with the reason: what ``ms-embed-layernorm`` declines; non-constant tables, scales
or zero points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.quantized.graphs import (
    INT_RANGES,
    MS_DOMAIN,
    Original,
    concrete,
    const,
    dequantized,
    given,
)
from trtconv.rewrites.rule import Emitted, NodeView, RewriteRule, RuleContext, Site
from trtconv.rewrites.transformer.embed_layernorm import INPUT_IDS, MASK, SEGMENT_IDS, EmbedLayerNormRule
from trtconv.rewrites.transformer.std_forms import MIN_OPSET, Ops

# QEmbedLayerNormalization: input_ids, segment_ids, word, position, segment, gamma, beta, mask, then the
# scales of word, position, segment, gamma, beta (8-12) and their zero points (13-17)
TABLES = (2, 3, 4, 5, 6)
SCALE_AT, ZERO_AT = 8, 13
PROOF_SEQ = 8
EMBED = EmbedLayerNormRule()


def float_view(view: NodeView) -> NodeView:
    """The node seen as the float ``EmbedLayerNormalization`` (its first 8 inputs, same places)."""
    names = tuple(view.inputs[i] if view.has_input(i) else "" for i in range(8))
    return NodeView("EmbedLayerNormalization", MS_DOMAIN, view.attrs, names, view.outputs, view.opset, view.shapes,
                    view.partial)


@dataclass(frozen=True)
class QEmbedMatch:
    tables: dict[int, np.ndarray]  # float layout index -> dequantized table
    view: NodeView  # as the float op
    original: Original


def _read(node: gs.Node, ctx: RuleContext) -> QEmbedMatch | None:
    tables: dict[int, np.ndarray] = {}
    for k, i in enumerate(TABLES):
        if given(node, i) is None:
            continue
        q, scale = const(given(node, i)), const(given(node, SCALE_AT + k))
        z_t = given(node, ZERO_AT + k)
        zero = const(z_t) if z_t is not None else None
        if q is None or q.dtype not in INT_RANGES or scale is None or scale.size != 1 or \
                (z_t is not None and (zero is None or zero.size != 1)):
            return None
        tables[i] = dequantized(q, scale, zero, 0)
    shapes: dict[str, Any] = dict(ctx.shapes)
    shapes.update({node.inputs[i].name: list(t.shape) for i, t in tables.items()})
    view = float_view(NodeView.of_gs(node, ctx.opset, ctx.graph_outputs, shapes))
    if EMBED.refusal(view) is not None:
        return None
    return QEmbedMatch(tables, view, Original.of([node]))


class QEmbedLayerNormRule(RewriteRule):
    name = "ort-qembed-layernorm"
    description = ("com.microsoft::QEmbedLayerNormalization -> Gather + Add + LayerNormalization on the dequantized "
                   "tables")
    ops = ((MS_DOMAIN, "QEmbedLayerNormalization"),)
    opsets = (MIN_OPSET, EMBED.opsets[1])

    def refusal(self, view: NodeView) -> str | None:
        return EMBED.refusal(float_view(view))

    def match(self, node: gs.Node, ctx: RuleContext) -> QEmbedMatch | None:
        return _read(node, ctx)

    def emit(self, ctx: RuleContext, site: Site, match: QEmbedMatch) -> Emitted:
        view = match.view
        for t, shape in zip(site.outputs, EMBED.output_shapes(view)):
            if shape is not None and isinstance(t, gs.Variable) and t.shape is None:
                t.shape = shape
        site.outputs[0].dtype = np.float32
        ins: list[gs.Tensor | None] = [t if t.name else None for t in site.inputs[:8]]
        for i, table in match.tables.items():
            ins[i] = gs.Constant(f"{site.name}/table{i}", table)
        outs = [t if view.has_output(i) else None for i, t in enumerate(site.outputs)]
        o = Ops(Emitter(ctx.graph, site.name), ctx.opset, np.float32)
        target = EMBED.write(o, view, ins, outs)
        return Emitted(tuple(o.em.nodes), f"{target} (dequantized tables)")

    def proof_case(self, ctx: RuleContext, site: Site, match: QEmbedMatch, emitted: Emitted) -> NodeProofCase | Proof:
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        feeds: dict[str, np.ndarray] = {}
        values: dict[int, np.ndarray] = dict(match.tables)
        ids_shape = concrete(ctx.shapes.get(site.inputs[INPUT_IDS].name), (1, PROOF_SEQ)) or (1, PROOF_SEQ)
        for i in (INPUT_IDS, SEGMENT_IDS, MASK):
            t = given_site(site, i)
            if t is None or isinstance(t, gs.Constant):
                continue
            dtype = np.dtype(t.dtype) if t.dtype is not None else np.dtype(np.int32)
            feeds[t.name] = EMBED.feed(match.view, i, ids_shape, dtype, values, rng)
        out = site.outputs[0].name
        expected = match.original.run(feeds, out, max(ctx.opset, MIN_OPSET))
        return NodeProofCase(emitted.nodes, out, feeds, expected.astype(np.float64), np.dtype(np.float32), ctx.opset,
                             rtol=max(ctx.settings.node_tolerance, 1e-5), shapes={"input_ids": ids_shape})


def given_site(site: Site, i: int) -> gs.Tensor | None:
    return site.inputs[i] if i < len(site.inputs) and site.inputs[i].name else None
