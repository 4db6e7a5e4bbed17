"""``com.microsoft::Attention`` (BERT/ViT/GPT-2 self-attention with the Q/K/V projection fused)
-> MatMul (+ bias) per Q, K, V, then MatMul-Softmax-MatMul with the mask as an additive bias.

Supported: mask_index absent, (B) key lengths (right padding), (B, T) or (B, S, T) 0/1 masks;
``unidirectional`` (causal); ``attention_bias``; ``qkv_hidden_sizes`` with a different V size;
``scale``; ``mask_filter_value``. Declined with the reason: past/present state (KV cache),
``do_rotary``, ``past_present_share_buffer``, 4-D masks, (2B) start/end indices, Q and K of
different sizes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr, ints_proof_value
from trtconv.rewrites.transformer.std_forms import (
    Ops,
    attention_core,
    causal_bias,
    key_length_bias,
    raw_mask_bias,
)

DEFAULT_MASK_FILTER = -10000.0  # ONNX Runtime's default mask_filter_value
INPUT, WEIGHTS, BIAS, MASK, PAST, ATTN_BIAS, PAST_LEN = range(7)


def shape_of(view: NodeView, i: int) -> Sequence[Any] | None:
    return view.shapes.get(view.inputs[i]) if view.has_input(i) else None


def mask_refusal(view: NodeView, mask: int, query: int) -> str | None:
    """Masks these rules turn into a bias: (B) key lengths, (B, T) and (B, S, T) 0/1 masks."""
    shape = shape_of(view, mask)
    if shape is None:
        return None if not view.has_input(mask) or view.partial else "the mask's rank is unknown (give --shapes)"
    if len(shape) == 1:
        q = shape_of(view, query)
        if q is not None and isinstance(q[0], int) and isinstance(shape[0], int) and shape[0] != q[0]:
            return f"mask of shape {list(shape)} (start/end positions): only (batch) key lengths are rewritten"
        return None
    if len(shape) in (2, 3):
        return None
    return f"{len(shape)}-D mask: only (batch), (batch, total_len) and (batch, len, total_len) masks are rewritten"


def mask_biases(o: Ops, view: NodeView, mask: gs.Tensor | None, mask_index: int, like: gs.Tensor,
                attn_bias: gs.Tensor | None, causal: bool, filter_value: float) -> list[gs.Tensor]:
    biases = []
    if mask is not None:
        rank = len(shape_of(view, mask_index) or ())
        biases.append(key_length_bias(o, mask, like, 1, filter_value) if rank == 1
                      else raw_mask_bias(o, mask, rank, filter_value))
    if causal:
        biases.append(causal_bias(o, like, 1, filter_value))
    if attn_bias is not None:
        biases.append(attn_bias)
    return biases


def mask_feed(shape: tuple[int, ...], total: int, rng: np.random.Generator, dtype: np.dtype) -> np.ndarray:
    """A proof mask: key lengths in [1, T], or 0/1 with the first key always kept (as real masks
    do: a query with every key masked is noise in any float32 implementation, ONNX Runtime's too)."""
    if len(shape) == 1:
        return ints_proof_value(shape, 1, total + 1, rng, dtype)
    mask = ints_proof_value(shape, 0, 2, rng, dtype)
    mask[..., 0] = 1
    return mask


class AttentionRule(FusedRule):
    name = "ms-attention"
    description = "com.microsoft Attention -> MatMul projections + MatMul-Softmax-MatMul"
    op = "Attention"

    def sizes(self, view: NodeView) -> tuple[int, int, int] | None:
        sizes = attr(view, "qkv_hidden_sizes", None)
        if sizes:
            return int(sizes[0]), int(sizes[1]), int(sizes[2])
        w = shape_of(view, WEIGHTS)
        if w is None or len(w) != 2 or not isinstance(w[1], int) or w[1] % 3:
            return None
        return w[1] // 3, w[1] // 3, w[1] // 3

    def refusal(self, view: NodeView) -> str | None:
        if view.has_input(PAST) or view.has_output(1) or view.has_input(PAST_LEN):
            return "past/present state (a KV cache) is not rewritten"
        for name in ("do_rotary", "past_present_share_buffer"):
            if int(attr(view, name, 0)):
                return f"{name}=1 is not rewritten"
        sizes = self.sizes(view)
        heads = int(attr(view, "num_heads", 0))
        if sizes is None and view.partial:
            return None
        if sizes is None:
            return "the weights' shape is unknown (need (input_hidden, 3*hidden) or qkv_hidden_sizes)"
        if sizes[0] != sizes[1]:
            return f"qkv_hidden_sizes {list(sizes)}: Q and K of different sizes"
        if heads <= 0 or sizes[0] % heads or sizes[2] % heads:
            return f"num_heads={heads} does not divide the hidden sizes {list(sizes)}"
        return mask_refusal(view, MASK, INPUT)

    def feed(self, view: NodeView, index: int, shape: tuple[int, ...], dtype: np.dtype,
             values: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        if index == MASK:
            return mask_feed(shape, int(values[INPUT].shape[1]) if INPUT in values else shape[-1], rng, dtype)
        return super().feed(view, index, shape, dtype, values, rng)

    def output_shapes(self, view: NodeView) -> list[list[Any] | None]:
        x, sizes = shape_of(view, INPUT), self.sizes(view)
        return [list(x[:2]) + [sizes[2]] if x is not None and len(x) == 3 and sizes else None]

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        def at(i: int) -> gs.Tensor | None:
            return ins[i] if i < len(ins) else None

        x, w, b = at(INPUT), at(WEIGHTS), at(BIAS)
        assert x is not None and w is not None and outs[0] is not None
        sizes = self.sizes(view)
        assert sizes is not None
        heads = int(attr(view, "num_heads", 0))
        head = sizes[0] // heads
        q, k, v = (project(o, x, w, b, start, end) for start, end in
                   ((0, sizes[0]), (sizes[0], sizes[0] + sizes[1]), (sizes[0] + sizes[1], sum(sizes))))
        scale = float(attr(view, "scale", 0.0)) or 1.0 / math.sqrt(head)
        filter_value = float(attr(view, "mask_filter_value", DEFAULT_MASK_FILTER))
        biases = mask_biases(o, view, at(MASK), MASK, x, at(ATTN_BIAS), bool(int(attr(view, "unidirectional", 0))),
                             filter_value)
        attention_core(o, q, k, v, heads, head, sizes[2] // heads, scale, biases, outs[0])
        return "MatMul+Softmax+MatMul attention"


def project(o: Ops, x: gs.Tensor, w: gs.Tensor, b: gs.Tensor | None, start: int, end: int) -> gs.Tensor:
    """x @ W[:, start:end] (+ b[start:end]): constant weights are cut once, others with Slice."""
    if isinstance(w, gs.Constant):
        wp: gs.Tensor = o.const(np.asarray(w.values)[:, start:end], np.asarray(w.values).dtype)
    else:
        wp = o.slice(w, start, end, 1)
    y = o.op("MatMul", [x, wp])
    if b is None:
        return y
    if isinstance(b, gs.Constant):
        bp: gs.Tensor = o.const(np.asarray(b.values)[start:end], np.asarray(b.values).dtype)
    else:
        bp = o.slice(b, start, end, 0)
    return o.op("Add", [y, bp])
