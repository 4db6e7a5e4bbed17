"""``RoiAlign`` (average and max mode, fixed or adaptive ``sampling_ratio``) from gathered corners.

ONNX Runtime computes every sample from its four bilinear corners, ``w_i * X[corner_i]``; average
mode sums them, max mode takes the largest *weighted corner* (not the largest interpolated
sample: a corner of weight 0, and every corner of a sample outside ``[-1, size]``, counts as 0).
This form gathers the four corners of every sample from ``X`` viewed as ``[N*H*W, C]`` (a
``Gather`` per corner; each box reads only its own image), weights them the same way and adds
them in ONNX Runtime's order, so the result matches it to the bit where the proofs measured it.

Adaptive sampling uses ``g = ceil(roi_size / bins)`` samples per bin and axis, a number of each
box. No static graph has a per-box count, and the boxes are not bounded, but the feature map
bounds what matters: samples are ``bin/g`` apart, more than 1/2 pixel once ``g >= 2``, so at most
``2L + 2`` of one bin lie in ``[-1, L]`` (``L`` = H or W); the others read nothing. The graph
enumerates a window of ``2L + 4`` samples per bin from the first in-map one (one more either side
for rounding), masks those at or past ``g``, divides by the real count ``max(g_h*g_w, 1)`` (average)
or adds the 0 of an out-of-map sample that the window left out (max). The cost grows with the map:
:func:`adaptive_cost` is checked against :data:`MAX_ADAPTIVE_SAMPLES` before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter

F32 = np.float32
I64 = np.int64
LOWEST = float(np.finfo(F32).min)
# samples per box times channels an adaptive RoiAlign may enumerate (memory of the gathered corners)
MAX_ADAPTIVE_SAMPLES = 1 << 22


def window(size: int) -> int:
    """Samples per bin the adaptive form enumerates on an axis of ``size`` pixels (module docstring)."""
    return 2 * size + 4


def adaptive_cost(oh: int, ow: int, h: int, w: int, c: int) -> int:
    """Corner values per box (times channels) the adaptive form gathers, for the refusal."""
    return oh * window(h) * ow * window(w) * max(c, 1)


@dataclass(frozen=True)
class CornerSpec:
    oh: int
    ow: int
    sr: int  # 0: adaptive
    scale: float
    half_pixel: bool
    max_mode: bool
    hw: tuple[int, int] | None  # the feature map's static H, W (needed when adaptive)


@dataclass(frozen=True)
class _Axis:
    lo: gs.Tensor  # [R, S] int64 corner indices
    hi: gs.Tensor
    w_lo: gs.Tensor  # [R, S] weights, 0 outside [-1, L] (and past g in average mode)
    w_hi: gs.Tensor
    counted: gs.Tensor | None  # [R, S] bool: sample index < g (adaptive)
    g: gs.Tensor  # [R, 1] samples per bin (float)
    outside: gs.Tensor | None  # [R, bins] bool: the bin has a sample outside [-1, L] (adaptive max)


class _Ops:
    """Node building for the model's opset (axes as attributes before opset 13 / 18)."""

    def __init__(self, em: Emitter, opset: int) -> None:
        self.em, self.opset = em, opset

    def op(self, kind: str, name: str, ins: list[gs.Tensor], attrs: dict | None = None, dtype: object = F32,
           out: gs.Tensor | None = None) -> gs.Tensor:
        o = out if out is not None else self.em.var(name, dtype=dtype)
        self.em.node(kind, name, ins, [o], attrs)
        return o

    def const(self, name: str, v: object, dtype: object = F32) -> gs.Constant:
        return self.em.const(name, np.asarray(v, dtype=dtype))

    def unsqueeze(self, name: str, t: gs.Tensor, axes: list[int], dtype: object = F32) -> gs.Tensor:
        if self.opset >= 13:
            return self.op("Unsqueeze", name, [t, self.const(f"{name}_axes", axes, I64)], dtype=dtype)
        return self.op("Unsqueeze", name, [t], {"axes": axes}, dtype=dtype)

    def reduce(self, kind: str, name: str, t: gs.Tensor, axes: list[int]) -> gs.Tensor:
        if self.opset >= (13 if kind == "ReduceSum" else 18):
            return self.op(kind, name, [t, self.const(f"{name}_axes", axes, I64)], {"keepdims": 0})
        return self.op(kind, name, [t], {"axes": axes, "keepdims": 0})

    def cmp(self, kind: str, name: str, a: gs.Tensor, b: gs.Tensor) -> gs.Tensor:
        return self.op(kind, name, [a, b], dtype=np.bool_)


def _axis(o: _Ops, s: CornerSpec, box: gs.Tensor, k: int, limit: gs.Tensor, name: str) -> _Axis:
    """Sample positions of one axis (k=0: y, k=1: x) for every box, as corner indices and weights."""
    bins = (s.oh, s.ow)[k]
    start = o.op("Gather", f"{name}_start", [box, o.const(f"{name}_i0", [1 - k], I64)], {"axis": 1})  # [R, 1]
    end = o.op("Gather", f"{name}_end", [box, o.const(f"{name}_i1", [3 - k], I64)], {"axis": 1})
    size = o.op("Sub", f"{name}_size", [end, start])
    if not s.half_pixel:
        size = o.op("Max", f"{name}_size_min", [size, o.const(f"{name}_one", 1.0)])
    binsz = o.op("Div", f"{name}_bin", [size, o.const(f"{name}_bins", float(bins))])  # [R, 1]
    g = o.op("Ceil", f"{name}_grid", [binsz]) if s.sr == 0 else o.const(f"{name}_grid_c", [[float(s.sr)]])
    g1 = o.op("Max", f"{name}_grid_safe", [g, o.const(f"{name}_one_g", 1.0)])
    bstart = o.op("Add", f"{name}_bin_start", [o.unsqueeze(f"{name}_start3", start, [2]), o.op(
        "Mul", f"{name}_bin_off", [o.const(f"{name}_ph", np.arange(bins).reshape(1, -1, 1)),
                                   o.unsqueeze(f"{name}_bin3", binsz, [2])])])  # [R, bins, 1]
    binsz3, g3 = o.unsqueeze(f"{name}_bin3b", binsz, [2]), o.unsqueeze(f"{name}_g3", g1, [2])
    if s.sr:
        kk: gs.Tensor = o.const(f"{name}_k", np.arange(s.sr).reshape(1, 1, -1))
        count = s.sr
    else:
        count = window(s.hw[k]) if s.hw else 0
        # the first sample at or past -1, less one for rounding: ceil((-1 - bstart) * g / bin - 0.5) - 1
        spacing = o.op("Max", f"{name}_bin_pos", [binsz3, o.const(f"{name}_tiny", 1e-6)])
        first = o.op("Ceil", f"{name}_first", [o.op("Sub", f"{name}_first_raw", [o.op("Div", f"{name}_first_q", [
            o.op("Mul", f"{name}_first_g", [o.op("Sub", f"{name}_to_edge", [o.const(f"{name}_m1", -1.0), bstart]),
                                            g3]), spacing]), o.const(f"{name}_half", 0.5)])])
        k0 = o.op("Max", f"{name}_k0", [o.op("Sub", f"{name}_k0_raw", [first, o.const(f"{name}_1", 1.0)]),
                                        o.const(f"{name}_0", 0.0)])
        kk = o.op("Add", f"{name}_k", [k0, o.const(f"{name}_window", np.arange(count).reshape(1, 1, -1))])
    pos = o.op("Add", f"{name}_pos3", [bstart, o.op("Div", f"{name}_off", [o.op("Mul", f"{name}_off_raw", [
        o.op("Add", f"{name}_kh", [kk, o.const(f"{name}_h", 0.5)]), binsz3]), g3])])  # [R, bins, count]
    flat = o.const(f"{name}_flat", [0, bins * count], I64)
    pos = o.op("Reshape", f"{name}_pos", [pos, flat])  # [R, S]
    lim_f = o.op("Cast", f"{name}_limit_f", [limit], {"to": 1})
    inside = o.op("And", f"{name}_inside", [
        o.op("Not", f"{name}_ge", [o.cmp("Less", f"{name}_lt", pos, o.const(f"{name}_m1b", -1.0))], dtype=np.bool_),
        o.op("Not", f"{name}_le", [o.cmp("Greater", f"{name}_gt", pos, lim_f)], dtype=np.bool_)], dtype=np.bool_)
    weight = o.op("Cast", f"{name}_inside_f", [inside], {"to": 1})
    counted = None
    if not s.sr:
        counted = o.op("Reshape", f"{name}_counted", [o.cmp("Less", f"{name}_k_lt_g", kk, o.unsqueeze(f"{name}_g3r", g, [2])), flat], dtype=np.bool_)
        if not s.max_mode:
            weight = o.op("Mul", f"{name}_weight", [weight, o.op("Cast", f"{name}_counted_f", [counted], {"to": 1})])
    last = o.op("Sub", f"{name}_last_px", [lim_f, o.const(f"{name}_1px", 1.0)])
    at = o.op("Min", f"{name}_clamp", [o.op("Max", f"{name}_clamp0", [pos, o.const(f"{name}_z", 0.0)]), last])
    lo = o.op("Floor", f"{name}_lo_f", [at])
    hi = o.op("Min", f"{name}_hi_f", [o.op("Add", f"{name}_lo1", [lo, o.const(f"{name}_1b", 1.0)]), last])
    frac = o.op("Sub", f"{name}_frac", [at, lo])
    w_hi = o.op("Mul", f"{name}_w_hi", [frac, weight])
    w_lo = o.op("Mul", f"{name}_w_lo", [o.op("Sub", f"{name}_1mfrac", [o.const(f"{name}_1c", 1.0), frac]), weight])
    outside = None
    if not s.sr and s.max_mode:  # first / last sample of each bin beyond [-1, L]: the window may have left it out
        first_at = o.op("Add", f"{name}_s0", [bstart, o.op("Div", f"{name}_s0_off", [
            o.op("Mul", f"{name}_s0_raw", [o.const(f"{name}_h0", 0.5), binsz3]), g3])])
        last_at = o.op("Add", f"{name}_sg", [bstart, o.op("Div", f"{name}_sg_off", [
            o.op("Mul", f"{name}_sg_raw", [o.op("Sub", f"{name}_gmh", [g3, o.const(f"{name}_h1", 0.5)]), binsz3]),
            g3])])
        outside = o.op("Reshape", f"{name}_outside", [o.op("Or", f"{name}_out3", [
            o.cmp("Less", f"{name}_s0_lt", first_at, o.const(f"{name}_m1c", -1.0)),
            o.cmp("Greater", f"{name}_sg_gt", last_at, lim_f)], dtype=np.bool_),
            o.const(f"{name}_bins_shape", [0, bins], I64)], dtype=np.bool_)
    return _Axis(o.op("Cast", f"{name}_lo", [lo], {"to": 7}, I64), o.op("Cast", f"{name}_hi", [hi], {"to": 7}, I64),
                 w_lo, w_hi, counted, g, outside)


def emit_corners(em: Emitter, opset: int, s: CornerSpec, x: gs.Tensor, rois: gs.Tensor, batch: gs.Tensor,
                 out: gs.Tensor) -> None:
    """Nodes writing ``out`` = RoiAlign(x, rois, batch) as ONNX Runtime computes it (module docstring)."""
    o = _Ops(em, opset)
    shape = o.op("Shape", "x_shape", [x], dtype=I64)
    dim = {i: o.op("Gather", f"x_dim{i}", [shape, o.const(f"i{i}", [i], I64)], {"axis": 0}, I64) for i in (1, 2, 3)}
    box = o.op("Mul", "box_scaled", [o.op("Cast", "rois_float", [rois], {"to": 1}), o.const("scale", s.scale)])
    if s.half_pixel:
        box = o.op("Sub", "box_shifted", [box, o.const("half", 0.5)])
    ay, ax = _axis(o, s, box, 0, dim[2], "y"), _axis(o, s, box, 1, dim[3], "x")
    per_y, per_x = (s.sr, s.sr) if s.sr else (window(s.hw[0]), window(s.hw[1])) if s.hw else (0, 0)
    b = o.op("Reshape", "box_image", [o.op("Cast", "batch_int64", [batch], {"to": 7}, I64),
                                      o.const("b_shape", [-1, 1, 1], I64)], dtype=I64)
    base = o.op("Mul", "image_base", [b, o.op("Mul", "x_hw", [dim[2], dim[3]], dtype=I64)], dtype=I64)  # [R, 1, 1]
    table = o.op("Reshape", "x_table", [o.op("Transpose", "x_nhwc", [x], {"perm": [0, 2, 3, 1]}),
                                         o.op("Concat", "table_shape", [o.const("m1i", [-1], I64), dim[1]], {"axis": 0},
                                              I64)])  # [N*H*W, C]
    rows = {k: o.op("Add", f"row_{k}", [base, o.op("Mul", f"row_off_{k}", [o.unsqueeze(f"y_{k}3", t, [2], I64), dim[3]],
                                                                  dtype=I64)], dtype=I64)
            for k, t in (("lo", ay.lo), ("hi", ay.hi))}  # [R, Sy, 1]
    wys = {"lo": o.unsqueeze("wy_lo3", ay.w_lo, [2]), "hi": o.unsqueeze("wy_hi3", ay.w_hi, [2])}
    cols = {"lo": o.unsqueeze("x_lo3", ax.lo, [1], I64), "hi": o.unsqueeze("x_hi3", ax.hi, [1], I64)}
    wxs = {"lo": o.unsqueeze("wx_lo3", ax.w_lo, [1]), "hi": o.unsqueeze("wx_hi3", ax.w_hi, [1])}
    corners = []  # ONNX Runtime's order: (y_lo, x_lo), (y_lo, x_hi), (y_hi, x_lo), (y_hi, x_hi)
    for ky, kx in (("lo", "lo"), ("lo", "hi"), ("hi", "lo"), ("hi", "hi")):
        name = f"{ky}_{kx}"
        index = o.op("Add", f"index_{name}", [rows[ky], cols[kx]], dtype=I64)  # [R, Sy, Sx]
        value = o.op("Gather", f"value_{name}", [table, index], {"axis": 0})  # [R, Sy, Sx, C]
        weight = o.unsqueeze(f"weight4_{name}", o.op("Mul", f"weight_{name}", [wys[ky], wxs[kx]]), [3])
        corners.append(o.op("Mul", f"weighted_{name}", [value, weight]))
    bins6 = o.const("bins6", [0, s.oh, per_y, s.ow, per_x, -1], I64)
    if s.max_mode:
        res = _max_tail(o, o.op("Max", "corner_max", corners), ay, ax, bins6)
    else:
        summed = o.op("Add", "sum_3", [o.op("Add", "sum_2", [o.op("Add", "sum_1", corners[:2]), corners[2]]), corners[3]])
        total = o.reduce("ReduceSum", "bin_sum", o.op("Reshape", "per_bin", [summed, bins6]), [2, 4])  # [R, oh, ow, C]
        count = o.op("Max", "count", [o.op("Mul", "grid_count", [ay.g, ax.g]), o.const("one_c", 1.0)])  # [R, 1]
        res = o.op("Div", "bin_mean", [total, o.op("Reshape", "count4", [count, o.const("c4", [-1, 1, 1, 1], I64)])])
    o.op("Transpose", "out", [res], {"perm": [0, 3, 1, 2]}, out=out)


def _max_tail(o: _Ops, best: gs.Tensor, ay: _Axis, ax: _Axis, bins6: gs.Constant) -> gs.Tensor:
    """[R, oh, ow, C]: the largest weighted corner (``best``, [R, Sy, Sx, C]) of each bin's samples."""
    if ay.counted is None or ax.counted is None or ay.outside is None or ax.outside is None:
        return o.reduce("ReduceMax", "bin_max", o.op("Reshape", "per_bin", [best, bins6]), [2, 4])
    counted = o.op("And", "counted", [o.unsqueeze("cy", ay.counted, [2], np.bool_),
                                      o.unsqueeze("cx", ax.counted, [1], np.bool_)], dtype=np.bool_)  # [R, Sy, Sx]
    best = o.op("Where", "uncounted_lowest", [o.unsqueeze("counted4", counted, [3], np.bool_), best,
                                               o.const("lowest", LOWEST)])
    res = o.reduce("ReduceMax", "bin_max", o.op("Reshape", "per_bin", [best, bins6]), [2, 4])  # [R, oh, ow, C]
    outside = o.op("Or", "bin_outside", [o.unsqueeze("oy", ay.outside, [2], np.bool_),
                                         o.unsqueeze("ox", ax.outside, [1], np.bool_)], dtype=np.bool_)  # [R, oh, ow]
    res = o.op("Where", "with_outside", [o.unsqueeze("outside4", outside, [3], np.bool_),
                                          o.op("Max", "max_zero", [res, o.const("zero", 0.0)]), res])
    some = o.op("And", "has_samples", [o.cmp("Greater", "gy_pos", ay.g, o.const("half_y", 0.5)),
                                       o.cmp("Greater", "gx_pos", ax.g, o.const("half_x", 0.5))], dtype=np.bool_)
    return o.op("Where", "empty_zero", [o.op("Reshape", "some4", [some, o.const("s4", [-1, 1, 1, 1], I64)],
                                             dtype=np.bool_), res, o.const("zero_e", 0.0)])
