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
    """ONNX Runtime's float32 ``(q - zero) * scale``, per-axis scale/zero along ``axis``.

    The integer difference is exact in int16 for 8-bit ``q`` and zero point (-255..255), in int64 otherwise, and
    exact again in float32; a zero point of zeros (INT8's symmetric weights) subtracts nothing. Either way the same
    float32 values, with temporaries of 2 or 4 bytes a value instead of 8 (ddddocr's 8210 x 1024 classifier: 67 MB
    per int64 temporary, folded again for every candidate measured)."""
    narrow = q.dtype.itemsize == 1 and q.dtype.kind in "iu" and (zero is None or (
        np.asarray(zero).dtype.itemsize == 1 and np.asarray(zero).dtype.kind in "iu"))
    wide = np.int16 if narrow else np.int64
    z = per_axis(zero, q.ndim, axis).astype(wide) if zero is not None and np.any(zero) else None
    y = (q.astype(wide) - z if z is not None else q).astype(np.float32)
    y *= per_axis(scale, q.ndim, axis).astype(np.float32)
    return np.asarray(y, np.float32)  # an array even for a 0-d q (numpy hands back a scalar there)
