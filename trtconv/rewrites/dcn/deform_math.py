"""A float64 NumPy reference for (modulated) deformable convolution, DCNv2.

Every DCN rewrite is proven against this function, so it is written for clarity
and exactness, not speed: bilinear sampling with zero padding exactly as
torchvision/mmcv/CenterNet and ONNX ``DeformConv`` define it, then a grouped matmul.

Offset layout (all dialects trtconv knows): channel ``dg*2*K + 2*k + 0`` is the
row (y) displacement of kernel point ``k`` of deformable group ``dg``, ``+1`` is
the column (x) displacement; ``K = kh*kw`` and ``k = i*kw + j``. Mask channel
``dg*K + k`` scales that sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DcnParams:
    """Attributes of one deformable convolution, in one dialect-free form."""

    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right (ONNX order)
    dilation: tuple[int, int] = (1, 1)
    group: int = 1
    deformable_group: int = 1

    def out_hw(self, h: int, w: int, kh: int, kw: int) -> tuple[int, int]:
        oh = (h + self.pads[0] + self.pads[2] - self.dilation[0] * (kh - 1) - 1) // self.stride[0] + 1
        ow = (w + self.pads[1] + self.pads[3] - self.dilation[1] * (kw - 1) - 1) // self.stride[1] + 1
        return oh, ow


def _bilinear(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Sample ``img[C, H, W]`` at float positions ``y, x`` (same shape S) → ``[C, *S]``.

    Points with y <= -1, y >= H, x <= -1 or x >= W give 0; corners outside the image
    count as 0 (torchvision's ``bilinear_interpolate`` and ONNX's zero-padded GridSample).
    """
    c, h, w = img.shape
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    y0 = np.floor(y)
    x0 = np.floor(x)
    ly, lx = y - y0, x - x0
    y0i, x0i = y0.astype(np.int64), x0.astype(np.int64)
    out = np.zeros((c, *y.shape), dtype=np.float64)
    for dy, dx, wgt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0i + dy, x0i + dx
        ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        vals = img[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
        out += vals * np.where(ok, wgt, 0.0)
    return out


def modulated_deform_conv2d(
    x: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray | None,
    weight: np.ndarray,
    bias: np.ndarray | None,
    params: DcnParams,
) -> np.ndarray:
    """DCNv2 forward in float64: ``x[N,C,H,W]``, ``offset[N,2*G*K,OH,OW]``, ``mask[N,G*K,OH,OW]``."""
    x = np.asarray(x, np.float64)
    offset = np.asarray(offset, np.float64)
    weight = np.asarray(weight, np.float64)
    n, c, h, w = x.shape
    cout, cin_g, kh, kw = weight.shape
    g, dg = params.group, params.deformable_group
    k = kh * kw
    if c != cin_g * g or cout % g or c % dg:
        raise ValueError(f"inconsistent channels: x {x.shape}, weight {weight.shape}, group {g}, deformable_group {dg}")
    oh, ow = offset.shape[2:]
    if offset.shape[1] != 2 * dg * k:
        raise ValueError(f"offset has {offset.shape[1]} channels, expected {2 * dg * k}")
    m = np.ones((n, dg * k, oh, ow)) if mask is None else np.asarray(mask, np.float64)
    sh, sw = params.stride
    dh, dw = params.dilation
    base_y = (np.arange(oh) * sh - params.pads[0])[:, None] * np.ones((1, ow))
    base_x = (np.arange(ow) * sw - params.pads[1])[None, :] * np.ones((oh, 1))
    cpg = c // dg
    out = np.zeros((n, cout, oh, ow), dtype=np.float64)
    for b in range(n):
        cols = np.zeros((c, k, oh, ow), dtype=np.float64)
        for d in range(dg):
            for i in range(kh):
                for j in range(kw):
                    kk = i * kw + j
                    y = base_y + i * dh + offset[b, d * 2 * k + 2 * kk]
                    xx = base_x + j * dw + offset[b, d * 2 * k + 2 * kk + 1]
                    sampled = _bilinear(x[b, d * cpg:(d + 1) * cpg].astype(np.float64), y, xx)
                    cols[d * cpg:(d + 1) * cpg, kk] = sampled * m[b, d * k + kk]
        cout_g = cout // g
        for gi in range(g):
            wg = weight[gi * cout_g:(gi + 1) * cout_g].reshape(cout_g, cin_g * k)
            cg = cols[gi * cin_g:(gi + 1) * cin_g].reshape(cin_g * k, oh * ow)
            out[b, gi * cout_g:(gi + 1) * cout_g] = (wg @ cg).reshape(cout_g, oh, ow)
    if bias is not None:
        out += np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return out
