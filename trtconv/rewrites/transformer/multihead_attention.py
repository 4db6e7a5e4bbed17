"""``com.microsoft::MultiHeadAttention`` (separate Q, K, V; CLIP, Whisper, SD fusions) ->
(+ bias) then MatMul-Softmax-MatMul with the key padding mask as an additive bias.

Supported: 3-D query/key/value, the fused projection bias, key_padding_mask (B), (B, T) or
(B, S, T), attention_bias, ``unidirectional`` (self-attention), ``scale``, ``mask_filter_value``.
Declined with the reason: packed QKV/KV, past/present (KV cache), cache_indirection, the qk output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.attention import (
    DEFAULT_MASK_FILTER,
    mask_biases,
    mask_feed,
    mask_refusal,
    shape_of,
)
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.std_forms import Ops, attention_core

QUERY, KEY, VALUE, BIAS, KEY_PADDING_MASK, ATTN_BIAS = range(6)
FIRST_STATE_INPUT = 6  # past_key, past_value, past_sequence_length, cache_indirection


def _last(view: NodeView, i: int) -> int | None:
    shape = shape_of(view, i)
    return shape[-1] if shape and isinstance(shape[-1], int) else None


class MultiHeadAttentionRule(FusedRule):
    name = "ms-multihead-attention"
    description = "com.microsoft MultiHeadAttention -> MatMul-Softmax-MatMul"
    op = "MultiHeadAttention"

    def refusal(self, view: NodeView) -> str | None:
        if not (view.has_input(KEY) and view.has_input(VALUE)):
            return "packed QKV or KV input (key/value absent) is not rewritten"
        if any(view.has_input(i) for i in range(FIRST_STATE_INPUT, len(view.inputs))) or any(
                view.has_output(i) for i in (1, 2)):
            return "past/present state (a KV cache) is not rewritten"
        if view.has_output(3):
            return "its qk output is used (not rewritten)"
        for i, what in ((QUERY, "query"), (KEY, "key"), (VALUE, "value")):
            shape = shape_of(view, i)
            if shape is None and view.partial:
                return None
            if shape is None:
                return f"the {what}'s shape is unknown (give --shapes)"
            if len(shape) != 3:
                return f"{len(shape)}-D {what}: only (batch, len, hidden) inputs are rewritten"
        heads = int(attr(view, "num_heads", 0))
        d, dv = _last(view, QUERY), _last(view, VALUE)
        if d is None or dv is None or heads <= 0 or d % heads or dv % heads:
            return f"num_heads={heads} does not divide the hidden sizes ({d}, {dv}) or they are unknown"
        return mask_refusal(view, KEY_PADDING_MASK, QUERY)

    def feed(self, view: NodeView, index: int, shape: tuple[int, ...], dtype: np.dtype,
             values: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        if index == KEY_PADDING_MASK:
            return mask_feed(shape, int(values[KEY].shape[1]) if KEY in values else shape[-1], rng, dtype)
        return super().feed(view, index, shape, dtype, values, rng)

    def output_shapes(self, view: NodeView) -> list[list[Any] | None]:
        q, dv = shape_of(view, QUERY), _last(view, VALUE)
        return [list(q[:2]) + [dv] if q is not None and len(q) == 3 and dv else None]

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        def at(i: int) -> gs.Tensor | None:
            return ins[i] if i < len(ins) else None

        q, k, v, b = at(QUERY), at(KEY), at(VALUE), at(BIAS)
        assert q is not None and k is not None and v is not None and outs[0] is not None
        d, dv = _last(view, QUERY), _last(view, VALUE)
        assert d is not None and dv is not None
        if b is not None:
            q, k, v = (o.op("Add", [t, o.slice(b, start, end, 0)]) for t, (start, end) in
                       zip((q, k, v), ((0, d), (d, 2 * d), (2 * d, 2 * d + dv))))
        heads = int(attr(view, "num_heads", 0))
        scale = float(attr(view, "scale", 0.0)) or 1.0 / math.sqrt(d // heads)
        filter_value = float(attr(view, "mask_filter_value", DEFAULT_MASK_FILTER))
        biases = mask_biases(o, view, at(KEY_PADDING_MASK), KEY_PADDING_MASK, k, at(ATTN_BIAS),
                             bool(int(attr(view, "unidirectional", 0))), filter_value)
        attention_core(o, q, k, v, heads, d // heads, dv // heads, scale, biases, outs[0])
        return "MatMul+Softmax+MatMul attention"
