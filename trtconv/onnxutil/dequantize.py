"""ONNX Runtime's DequantizeLinear of constants, in numpy: what a rewrite (a quantized pattern turned to float)
and INT8's measurement (weights dequantized once, bit for bit) both store in place of the node."""

from __future__ import annotations

import numpy as np


def per_axis(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A scale or zero point (one value, or one per slice along ``axis``) shaped to broadcast against an
    array of rank ``ndim``."""
    v = np.asarray(v)
    if v.size == 1 or ndim == 0:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.size
    return v.reshape(shape)


def dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray:
    """ONNX Runtime's float32 ``(q - zero) * scale``, per-axis scale/zero along ``axis``."""
    z = per_axis(zero, q.ndim, axis).astype(np.int64) if zero is not None else 0
    # an array even for a 0-d q (numpy hands back a scalar there)
    return np.asarray((q.astype(np.int64) - z).astype(np.float32) * per_axis(scale, q.ndim, axis).astype(np.float32),
                      np.float32)
