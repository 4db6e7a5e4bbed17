"""Building blocks the fused-op rules emit: standard ONNX nodes valid at the model's opset, in
the patterns TensorRT fuses (its LayerNormalization, GELU and attention fusions).

Every helper returns the tensor it wrote; nodes are named ``<site>/<op>_<n>`` by :class:`Ops`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter

LAYERNORM_OPSET = 17  # ONNX LayerNormalization (TensorRT imports and fuses it)
REDUCE_AXES_INPUT_OPSET = 18  # ReduceMean/ReduceMax take axes as an input from here
AXES_INPUT_OPSET = 13  # Unsqueeze/Squeeze/ReduceSum take axes as an input from here
MIN_OPSET = 11  # the oldest opset the emitted forms are written for (Range, Slice with inputs)


class Ops:
    """Emits standard ONNX nodes at one opset and float dtype; each returns its output tensor."""

    def __init__(self, em: Emitter, opset: int, dtype: Any) -> None:
        self.em = em
        self.opset = opset
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float32)
        self.count = 0

    def _suffix(self, op: str) -> str:
        self.count += 1
        return f"{op.lower()}_{self.count}"

    def const(self, values: Any, dtype: Any = None) -> gs.Constant:
        arr = np.asarray(values, dtype=dtype if dtype is not None else self.dtype)
        return self.em.const(self._suffix("c"), arr)

    def ints(self, values: Sequence[int]) -> gs.Constant:
        return self.const(list(values), np.int64)

    def op(self, op: str, inputs: list[gs.Tensor], attrs: dict[str, Any] | None = None,
           out: gs.Tensor | None = None, dtype: Any = None) -> gs.Tensor:
        suffix = self._suffix(op)
        result = out if out is not None else self.em.var(suffix, dtype=dtype)
        self.em.node(op, suffix, inputs, [result], attrs)
        return result

    # -- shape helpers, opset-aware
    def unsqueeze(self, x: gs.Tensor, axes: Sequence[int]) -> gs.Tensor:
        if self.opset >= AXES_INPUT_OPSET:
            return self.op("Unsqueeze", [x, self.ints(axes)])
        return self.op("Unsqueeze", [x], {"axes": list(axes)})

    def reduce_mean(self, x: gs.Tensor, axes: Sequence[int]) -> gs.Tensor:
        if self.opset >= REDUCE_AXES_INPUT_OPSET:
            return self.op("ReduceMean", [x, self.ints(axes)], {"keepdims": 1})
        return self.op("ReduceMean", [x], {"axes": list(axes), "keepdims": 1})

    def reduce_sum(self, x: gs.Tensor, axes: Sequence[int], keepdims: int, out: gs.Tensor | None = None) -> gs.Tensor:
        if self.opset >= AXES_INPUT_OPSET:
            return self.op("ReduceSum", [x, self.ints(axes)], {"keepdims": keepdims}, out=out)
        return self.op("ReduceSum", [x], {"axes": list(axes), "keepdims": keepdims}, out=out)

    def slice(self, x: gs.Tensor, start: int, end: int | gs.Tensor, axis: int, step: int = 1) -> gs.Tensor:
        ends = end if isinstance(end, gs.Tensor) else self.ints([end])
        return self.op("Slice", [x, self.ints([start]), ends, self.ints([axis]), self.ints([step])])

    def dim(self, x: gs.Tensor, axis: int) -> gs.Tensor:
        """``x.shape[axis]`` at run time, as a 1-element int64 tensor."""
        return self.op("Gather", [self.op("Shape", [x]), self.ints([axis])], {"axis": 0})

    def scalar_dim(self, x: gs.Tensor, axis: int) -> gs.Tensor:
        """``x.shape[axis]`` at run time, as an int64 scalar (for Range)."""
        return self.op("Gather", [self.op("Shape", [x]), self.const(axis, np.int64)], {"axis": 0})

    def cast(self, x: gs.Tensor, to: int) -> gs.Tensor:
        return self.op("Cast", [x], {"to": to})


def layer_norm(o: Ops, x: gs.Tensor, gamma: gs.Tensor, beta: gs.Tensor | None, epsilon: float,
               out: gs.Tensor | None = None) -> gs.Tensor:
    """LayerNormalization over the last axis: the ONNX op from opset 17, else the exporters'
    decomposition (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) TensorRT fuses."""
    if o.opset >= LAYERNORM_OPSET:
        inputs = [x, gamma] + ([beta] if beta is not None else [])
        return o.op("LayerNormalization", inputs, {"axis": -1, "epsilon": float(epsilon)}, out=out)
    mean = o.reduce_mean(x, [-1])
    d = o.op("Sub", [x, mean])
    var = o.reduce_mean(o.op("Pow", [d, o.const(2.0)]), [-1])
    std = o.op("Sqrt", [o.op("Add", [var, o.const(epsilon)])])
    y = o.op("Div", [d, std])
    if beta is None:
        return o.op("Mul", [y, gamma], out=out)
    return o.op("Add", [o.op("Mul", [y, gamma]), beta], out=out)


def rms_norm(o: Ops, x: gs.Tensor, gamma: gs.Tensor, epsilon: float, out: gs.Tensor | None = None) -> gs.Tensor:
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (T5/LLaMA's RMSNorm)."""
    ms = o.reduce_mean(o.op("Pow", [x, o.const(2.0)]), [-1])
    std = o.op("Sqrt", [o.op("Add", [ms, o.const(epsilon)])])
    return o.op("Mul", [o.op("Div", [x, std]), gamma], out=out)


def gelu_erf(o: Ops, x: gs.Tensor, out: gs.Tensor | None = None) -> gs.Tensor:
    """0.5 * x * (1 + erf(x / sqrt(2))), as PyTorch exports it (TensorRT fuses the pattern)."""
    e = o.op("Erf", [o.op("Div", [x, o.const(math.sqrt(2.0))])])
    return o.op("Mul", [o.op("Mul", [x, o.op("Add", [e, o.const(1.0)])]), o.const(0.5)], out=out)


def gelu_tanh(o: Ops, x: gs.Tensor, out: gs.Tensor | None = None) -> gs.Tensor:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), as PyTorch exports it."""
    cube = o.op("Mul", [o.op("Pow", [x, o.const(3.0)]), o.const(0.044715)])
    inner = o.op("Mul", [o.op("Add", [x, cube]), o.const(math.sqrt(2.0 / math.pi))])
    t = o.op("Add", [o.op("Tanh", [inner]), o.const(1.0)])
    return o.op("Mul", [o.op("Mul", [x, t]), o.const(0.5)], out=out)


def split_heads(o: Ops, x: gs.Tensor, heads: int, head_size: int, perm: Sequence[int]) -> gs.Tensor:
    """(B, S, heads*head_size) -> Reshape (B, S, heads, head_size) -> Transpose ``perm``."""
    r = o.op("Reshape", [x, o.ints([0, 0, heads, head_size])])
    return o.op("Transpose", [r], {"perm": list(perm)})


def attention_core(o: Ops, q: gs.Tensor, k: gs.Tensor, v: gs.Tensor, heads: int, qk_head: int, v_head: int,
                   scale: float, biases: Sequence[gs.Tensor], out: gs.Tensor) -> gs.Tensor:
    """softmax(Q K^T * scale + biases) V over ``heads`` heads: Q (B,S,N*h), K (B,T,N*h), V
    (B,T,N*hv) -> (B,S,N*hv). MatMul-Softmax-MatMul with the mask as an additive bias: the
    form TensorRT's attention fusion matches."""
    qh = split_heads(o, q, heads, qk_head, (0, 2, 1, 3))  # B,N,S,h
    kh = split_heads(o, k, heads, qk_head, (0, 2, 3, 1))  # B,N,h,T
    vh = split_heads(o, v, heads, v_head, (0, 2, 1, 3))  # B,N,T,hv
    scores = o.op("Mul", [o.op("MatMul", [qh, kh]), o.const(scale)])
    for b in biases:
        scores = o.op("Add", [scores, b])
    probs = o.op("Softmax", [scores], {"axis": -1})
    ctx = o.op("Transpose", [o.op("MatMul", [probs, vh])], {"perm": [0, 2, 1, 3]})  # B,S,N,hv
    return o.op("Reshape", [ctx, o.ints([0, 0, heads * v_head])], out=out)


def keep_to_bias(o: Ops, keep: gs.Tensor, filter_value: float) -> gs.Tensor:
    """A boolean keep-mask -> additive bias: 0 where kept, ``filter_value`` where masked."""
    return o.op("Where", [keep, o.const(0.0), o.const(filter_value)])


def key_length_bias(o: Ops, lengths: gs.Tensor, like: gs.Tensor, axis: int, filter_value: float) -> gs.Tensor:
    """1-D key lengths (B,) -> bias (B,1,1,T): key j of batch b is masked when j >= lengths[b]
    (right-side padding); T is ``like.shape[axis]`` at run time."""
    t = o.scalar_dim(like, axis)
    r = o.op("Range", [o.const(0, np.int64), t, o.const(1, np.int64)])  # (T,)
    lens = o.unsqueeze(o.cast(lengths, 7), [1])  # (B,1) int64
    keep = o.op("Less", [o.unsqueeze(r, [0]), lens])  # (B,T)
    return o.unsqueeze(keep_to_bias(o, keep, filter_value), [1, 2])


def raw_mask_bias(o: Ops, mask: gs.Tensor, rank: int, filter_value: float) -> gs.Tensor:
    """A 0/1 mask (B,T) or (B,S,T) -> additive bias broadcastable to (B,N,S,T)."""
    keep = o.op("Greater", [o.cast(mask, 7), o.const(0, np.int64)])  # any integer mask type
    bias = keep_to_bias(o, keep, filter_value)
    return o.unsqueeze(bias, [1, 2] if rank == 2 else [1])


def causal_bias(o: Ops, like: gs.Tensor, axis: int, filter_value: float) -> gs.Tensor:
    """(S,S) bias: ``filter_value`` where key j comes after query i (j > i), else 0."""
    s = o.scalar_dim(like, axis)
    r = o.op("Range", [o.const(0, np.int64), s, o.const(1, np.int64)])
    later = o.op("Greater", [o.unsqueeze(r, [0]), o.unsqueeze(r, [1])])  # [i, j] = j > i
    return o.op("Where", [later, o.const(filter_value), o.const(0.0)])
