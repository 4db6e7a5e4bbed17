"""DCNv2 as standard ONNX operators only: the ``portable`` DCN target.

For runtimes with no plugins (TensorRT-RTX) and users who cannot ship a plugin library.
Every op emitted is one TensorRT's ONNX parser imports natively; the computation is
deformable convolution written out as sampling then a dense product (im2col), the sampling
as gathers of the four bilinear corners from channels-last ``x``:

1. Positions: the offsets ``[N, 2*G*K, OH, OW]`` (``G`` = deformable groups, ``K = kh*kw``
   taps, (dy, dx) pairs) plus every tap's position at every output pixel, in pixels of ``x``
   padded by one zero pixel each side, transposed to ``[N, OH, OW, K, G, 2]`` (see
   :func:`_tap_positions`), and y and x ``Slice``-d apart.
2. Corners, per axis: ``Floor`` and the fraction. A sample has a corner in the image only
   where its top-left corner lies in ``[0, H] x [0, W]`` of the padded image; there all four
   corners lie in it, and its border supplies the zeros of those outside (DCNv2's border
   rule). The top-left corner is clamped into that range (``Relu``, ``Min``), and where the
   clamp moved it (``Equal``, ``Where``) the weights are zero, so every index stays in
   bounds; cast to INT32, it gives the four corners' rows of ``x`` seen as
   ``[N*(H+2)*(W+2)*G, C/G]`` (each axis adding its part for all four). Their bilinear
   weights ``(1-t)`` / ``t`` multiplied over y and x, times the mask, then cast to the
   model's type: ``[N, OH, OW, K, G, 4, 1]``. All of this is per (pixel, tap, group): the
   channels never enter it, and it is one pass over the offsets (see :func:`_axis`).
3. ``x`` padded (``Pad``), ``Transpose``-d channels last and ``Reshape``-d to those rows; one
   ``Gather`` of the corners' rows, ``Mul`` by their weights and ``ReduceSum`` over the four:
   the im2col columns, channels last, ``[N*OH*OW, K*C]`` (column ``k*C + c``), in the model's
   type. TensorRT-RTX's builder fuses steps 1-3 into one generated kernel that writes only the
   columns (its engine's layer listing).
4. The product: ``Gemm`` with the weight as ``[K*C, Cout]`` (an initializer is transposed
   once) and the bias, then ``Reshape`` and ``Transpose`` to ``[N, Cout, OH, OW]``. With
   ``group > 1`` the columns are transposed to ``[N, C*K, OH, OW]`` (channel ``c*K + k``) for a
   grouped 1x1 ``Conv`` instead (one more pass over the columns).

The tap positions and the image's size come from the offset's and the input's run-time shape
(``Shape``, ``Range``), so batch, height and width may all be dynamic and the graph holds no
spatial size; only the channel count must be known. Asymmetric pads only move the taps.

FP16 models compute positions, fractions and weights in FP32 (the offsets and the mask are
cast up; an FP16 position would lose up to ``W * 2^-11`` pixels) and gather, blend and
multiply in FP16, as the plugin does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from trtconv.errors import UnsupportedModelError
from trtconv.load import value_dtypes, value_shapes
from trtconv.rewrites.dcn.deform_math import DcnParams
from trtconv.rewrites.dcn.dialects import DcnNode, dialect_of, read_any
from trtconv.rewrites.dcn.lowering import DcnInputs, DcnTarget
from trtconv.rewrites.dcn.plugin_spec import PluginSpec
from trtconv.rewrites.emitter import PENDING_DOMAIN, Emitter

TARGET = "portable"
# The model's opset is raised to this when lower (the form's ops are emitted in the pending
# domain where their signature depends on it, see emitter.PENDING_DOMAIN). ReduceSum takes its
# axes as an input from opset 13, but at 13 ONNX shape inference loses the shape of the DCN's
# output (where the graph proof is cut) and at 16 it keeps it (measured, onnx 1.2x).
OPSET = 16


def _static(dims: Sequence[Any] | None) -> tuple[int, ...] | None:
    if dims is None or len(dims) != 4 or not all(isinstance(d, (int, np.integer)) for d in dims[1:]):
        return None
    return tuple(int(d) for d in dims[1:])


def _float_dtype(t: gs.Tensor | None) -> np.dtype:
    if t is None or t.dtype is None:
        return np.dtype(np.float32)
    try:
        return np.dtype(t.dtype)
    except TypeError:
        return np.dtype(np.float32)


class _Ops:
    """Small node builders over an :class:`Emitter` (names ``<node>/<suffix>``)."""

    def __init__(self, em: Emitter) -> None:
        self.em = em

    def op(self, op: str, suffix: str, inputs: list[gs.Tensor], dtype: Any = None,
           attrs: Mapping[str, Any] | None = None, domain: str | None = None) -> gs.Tensor:
        out = self.em.var(suffix, dtype=dtype)
        self.em.node(op, suffix, inputs, [out], attrs, domain=domain)
        return out

    def const(self, suffix: str, values: Any, dtype: Any = np.int64) -> gs.Constant:
        return self.em.const(suffix, np.asarray(values, dtype=dtype))

    def cast(self, t: gs.Tensor, suffix: str, dtype: np.dtype) -> gs.Tensor:
        if _float_dtype(t) == dtype:
            return t
        return self.op("Cast", suffix, [t], dtype, {"to": int(helper.np_dtype_to_tensor_dtype(dtype))})

    def reshape(self, t: gs.Tensor, suffix: str, shape: Sequence[int | gs.Tensor], dtype: Any) -> gs.Tensor:
        """``shape``: ints, and 1-D INT64 tensors for dims known only at run time."""
        if all(isinstance(d, int) for d in shape):
            target: gs.Tensor = self.const(f"{suffix}_shape", list(shape))
        else:
            parts = [d if isinstance(d, gs.Tensor) else self.const(f"{suffix}_dim{i}", [d]) for i, d in enumerate(shape)]
            target = self.op("Concat", f"{suffix}_shape", parts, np.int64, {"axis": 0})
        return self.op("Reshape", suffix, [t, target], dtype)


def _channels(dcn: DcnNode, x: gs.Tensor, weight: gs.Tensor) -> int | None:
    """The input's channel count: x's dim 1 where it is known, else the weight's (its dim 1 is
    C / group), which an exporter writes even when every dim of x is dynamic."""
    xs = x.shape
    if xs is not None and len(xs) == 4 and isinstance(xs[1], (int, np.integer)):
        return int(xs[1])
    ws = weight.shape
    if ws is not None and len(ws) == 4 and isinstance(ws[1], (int, np.integer)):
        return int(ws[1]) * dcn.params.group
    return None


def _check_shapes(em: Emitter, dcn: DcnNode, x: gs.Tensor, offset: gs.Tensor, weight: gs.Tensor) -> int:
    """The input's channel count, once the shapes are known to fit together."""
    p = dcn.params
    xs = x.shape
    c = _channels(dcn, x, weight)
    if (xs is not None and len(xs) != 4) or c is None or dcn.kernel is None:
        raise UnsupportedModelError(
            f"node {em.base!r}: the portable DCN form needs the input's channel count and the kernel size "
            f"(x has shape {list(xs) if xs is not None else 'unknown'}, weight "
            f"{list(weight.shape) if weight.shape is not None else 'unknown'}{'' if dcn.kernel else ', kernel unknown'})",
            hint="give --shapes INPUT:NxCxHxW, or use another --dcn-target")
    k = dcn.kernel[0] * dcn.kernel[1]
    sizes = _static(xs)
    oh, ow = p.out_hw(sizes[1], sizes[2], *dcn.kernel) if sizes else (1, 1)
    offs, ws = _static(offset.shape), _static(weight.shape)
    if (oh < 1 or ow < 1 or c % p.deformable_group or c % p.group or (ws is not None and ws[0] * p.group != c)
            or (offs is not None and (offs[0] != 2 * p.deformable_group * k or (sizes and offs[1:] != (oh, ow))))):
        raise UnsupportedModelError(
            f"node {em.base!r}: shapes do not fit together: x {list(xs)}, offset "
            f"{list(offset.shape) if offset.shape is not None else '?'}, weight {list(weight.shape or [])}, {p}",
            hint="the offset must be [N, 2*deformable_group*kh*kw, OH, OW] for the convolution's output size")
    return c


# A sample's four corners, (top, left), (top, left + 1), (top + 1, left), (top + 1, left + 1): on
# which side of its top-left corner each lies along y and along x (0: that corner's row or
# column, weight 1 - t; 1: the next, weight t).
CORNER_DOWN = np.array([0, 0, 1, 1])
CORNER_RIGHT = np.array([0, 1, 0, 1])


def _tap_positions(ops: _Ops, p: DcnParams, kernel: tuple[int, int], oshape: gs.Tensor, sdt: np.dtype) -> gs.Tensor:
    """Unshifted sampling position ``(y, x)`` of every tap at every output pixel in ``x`` padded by
    one pixel each side, ``[K, 1, 2, OH, OW]``: ``o*stride - pad_begin + tap*dilation + 1``, from
    ``Range`` over the offset's run-time OH and OW."""
    kh, kw = kernel
    taps = np.arange(kh * kw)

    def along(axis: int, stride: int, begin: int, tap_step: np.ndarray, name: str) -> gs.Tensor:
        size = ops.op("Gather", f"o{name}", [oshape, ops.const(f"i{axis}", axis)], np.int64, {"axis": 0})
        index = ops.op("Range", f"o{name}_range", [ops.const(f"{name}_zero", 0), size, ops.const(f"{name}_step", 1)],
                       np.int64, domain=PENDING_DOMAIN)
        pix = ops.op("Mul", f"o{name}_pixels", [ops.cast(index, f"o{name}_float", sdt),
                                                 ops.const(f"s{name}", [stride], sdt)], sdt)
        tap = ops.const(f"tap_{name}_offsets", (tap_step - begin + 1).reshape(-1, 1, 1, 1, 1), sdt)
        return ops.op("Add", f"tap_{name}", [pix, tap], sdt)  # [K, 1, 1, 1, size]

    cols = along(3, p.stride[1], p.pads[1], (taps % kw) * p.dilation[1], "x")  # [K, 1, 1, 1, OW]
    rows = along(2, p.stride[0], p.pads[0], (taps // kw) * p.dilation[0], "y")
    rows = ops.op("Transpose", "tap_y_column", [rows], sdt, {"perm": [0, 1, 2, 4, 3]})  # [K, 1, 1, OH, 1]
    px = ops.op("Mul", "tap_x_channel", [cols, ops.const("x_channel", [[[0]], [[1]]], sdt)], sdt)  # [K, 1, 2, 1, OW]
    py = ops.op("Mul", "tap_y_channel", [rows, ops.const("y_channel", [[[1]], [[0]]], sdt)], sdt)  # [K, 1, 2, OH, 1]
    return ops.op("Add", "tap_positions", [px, py], sdt)


def _axis(ops: _Ops, pos: gs.Tensor, axis: int, size: gs.Tensor, name: str,
          sdt: np.dtype) -> tuple[gs.Tensor, gs.Tensor, gs.Tensor]:
    """One coordinate of the positions in ``x`` padded by one pixel (``axis`` 0: y, 1: x of the
    pair), ``[N, OH, OW, K, dg, 1]``: the top-left corner's row (or column) clamped into
    ``[0, size]``, where it and the next lie in the padded image; whether the clamp left it
    alone (else the sample has no corner in the image and its weights are zero); and the
    fraction ``t``. The coordinate is a ``Slice`` of the (y, x) pair: a fusing compiler
    reads it in place, where a ``Gather`` of a computed tensor had Inductor write the pair
    out first, and a sum over the pair counted as two reads of each input."""
    p = ops.op("Slice", f"position_{name}", [pos, ops.const(f"{name}_start", [axis]), ops.const(f"{name}_end", [axis + 1]),
                                              ops.const(f"{name}_axes", [-1])], sdt)
    low = ops.op("Floor", f"floor_{name}", [p], sdt)
    top = ops.op("Min", f"top_{name}", [ops.op("Relu", f"above_{name}", [low], sdt), size], sdt)
    inside = ops.op("Equal", f"inside_{name}", [top, low], np.bool_)
    return top, inside, ops.op("Sub", f"fraction_{name}", [p, low], sdt)


def _side_weights(ops: _Ops, frac: gs.Tensor, inside: gs.Tensor, side: np.ndarray, name: str,
                  sdt: np.dtype) -> gs.Tensor:
    """The four corners' bilinear weights along one axis, ``1 - t`` or ``t`` by ``side``, zero
    where the sample has no corner in the image: ``[N, OH, OW, K, dg, 4]``."""
    slope = ops.op("Mul", f"slopes_{name}", [frac, ops.const(f"slope_{name}", 2 * side - 1, sdt)], sdt)
    w = ops.op("Add", f"sides_{name}", [slope, ops.const(f"intercept_{name}", 1 - side, sdt)], sdt)
    return ops.op("Where", f"weight_{name}", [inside, w, ops.const(f"zero_{name}", [0], sdt)], sdt)


def _corner_rows(ops: _Ops, top_y: gs.Tensor, top_x: gs.Tensor, xshape: gs.Tensor, dg: int) -> gs.Tensor:
    """The four corners' rows of ``x`` padded by one pixel, channels last, seen as
    ``[N*(H+2)*(W+2)*dg, C/dg]``: ``[N, OH, OW, K, dg, 4]`` INT32, from the top-left corners'
    row and column in the padded image. Each axis adds its part for all four corners (its
    steps included), so that every tensor here is one value a sample or a corner."""
    i32 = np.int32
    hw = ops.op("Gather", "x_hw", [xshape, ops.const("i_hw", [2, 3])], np.int64, {"axis": 0})
    padded = ops.op("Add", "x_hw_padded", [ops.cast(hw, "x_hw_int", np.dtype(i32)), ops.const("two", [2], i32)], i32)
    width = ops.op("Gather", "x_w_padded", [padded, ops.const("i1", [1])], i32, {"axis": 0})
    row_step = ops.op("Mul", "row_stride", [width, ops.const("dg", [dg], i32)], i32)  # an image row: (W+2)*dg rows
    down = ops.op("Mul", "corner_down", [row_step, ops.const("down", CORNER_DOWN, i32)], i32)
    along_y = ops.op("Mul", "row_part", [ops.cast(top_y, "top_y_int", np.dtype(i32)), row_step], i32)
    along_y = ops.op("Add", "rows_y", [along_y, down], i32)
    along_x = ops.op("Mul", "column_part", [ops.cast(top_x, "top_x_int", np.dtype(i32)), ops.const("dg_col", [dg], i32)],
                     i32)
    along_x = ops.op("Add", "rows_x", [along_x, ops.const("right", CORNER_RIGHT * dg, i32)], i32)
    # + the image's first row, n * (H+2)*(W+2)*dg, and the deformable group
    height = ops.op("Gather", "x_h_padded", [padded, ops.const("i0", [0])], i32, {"axis": 0})
    image = ops.op("Mul", "image_rows", [ops.op("Mul", "x_area_padded", [height, width], i32),
                                         ops.const("dg_img", [dg], i32)], i32)
    batch = ops.op("Gather", "x_n", [xshape, ops.const("i0s64", 0)], np.int64, {"axis": 0})
    first = ops.op("Range", "batch_range", [ops.const("n_zero", 0), batch, ops.const("n_step", 1)], np.int64,
                   domain=PENDING_DOMAIN)
    first = ops.op("Mul", "batch_rows", [ops.cast(first, "batch_range_int", np.dtype(i32)), image], i32)
    first = ops.reshape(first, "batch_rows_column", [-1, 1, 1, 1, 1, 1], i32)
    first = ops.op("Add", "group_rows", [first, ops.const("group_rows_of", np.arange(dg).reshape(dg, 1), i32)], i32)
    return ops.op("Add", "corner_rows", [ops.op("Add", "corner_rows_in_image", [along_y, along_x], i32), first], i32)


def _corner_weights(ops: _Ops, along_y: gs.Tensor, along_x: gs.Tensor, mask: gs.Tensor | None, dg: int, k: int,
                    ohw: gs.Tensor, sdt: np.dtype, xdt: np.dtype) -> gs.Tensor:
    """The corners' bilinear weights times the mask, computed in ``sdt`` and cast to the model's
    type once: ``[N, OH, OW, K, dg, 4, 1]``."""
    wts = ops.op("Mul", "corner_weights", [along_y, along_x], sdt)  # [N, OH, OW, K, dg, 4]
    if mask is not None:
        m = ops.reshape(ops.cast(mask, "mask_float", sdt), "mask_taps", [-1, dg, k, ohw], sdt)
        m = ops.op("Transpose", "mask_last", [m], sdt, {"perm": [0, 3, 4, 2, 1]})  # [N, OH, OW, K, dg]
        m = ops.reshape(m, "mask_corners", [0, 0, 0, 0, 0, 1], sdt)
        wts = ops.op("Mul", "modulate", [wts, m], sdt)
    return ops.cast(ops.reshape(wts, "corner_weights_column", [0, 0, 0, 0, 0, 4, 1], sdt), "corner_weights_cast", xdt)


def emit(em: Emitter, dcn: DcnNode, io: DcnInputs, out: gs.Tensor, _spec: PluginSpec | None) -> None:
    """Replacement nodes writing ``out``: corner gathers on channels-last ``x``, then one product."""
    ops = _Ops(em)
    x, offset = io.x, io.offset
    p = dcn.params
    c = _check_shapes(em, dcn, x, offset, io.weight)
    assert dcn.kernel is not None  # _check_shapes says so
    kh, kw = dcn.kernel
    k = kh * kw
    dg = p.deformable_group
    xdt = _float_dtype(x)
    sdt = xdt if xdt.itemsize >= 4 else np.dtype(np.float32)  # positions and weights: FP32 at least
    oshape = ops.op("Shape", "offset_dims", [offset], np.int64)
    ohw = ops.op("Gather", "offset_hw", [oshape, ops.const("i23", [2, 3])], np.int64, {"axis": 0})
    xshape = ops.op("Shape", "x_dims", [x], np.int64)

    # 1. sampling positions in pixels in x padded by one pixel, [N, OH, OW, K, dg, 2] (y, x)
    off = ops.reshape(ops.cast(offset, "offset_float", sdt), "offset_taps", [-1, dg, k, 1, 2, ohw], sdt)
    pos = ops.op("Add", "positions", [off, _tap_positions(ops, p, (kh, kw), oshape, sdt)], sdt)
    pos = ops.op("Transpose", "positions_last", [pos], sdt, {"perm": [0, 5, 6, 2, 1, 3, 4]})
    pos = ops.reshape(pos, "positions_pairs", [0, 0, 0, 0, 0, 2], sdt)  # [N, OH, OW, K, dg, 2]
    # 2. the four corners: rows of the padded channels-last image, and weights (mask folded in).
    # A sample has a corner in the image only where its top-left corner lies in [0, H] x [0, W]
    # of x padded by one pixel; there all four corners lie in the padded image, whose border
    # supplies the zeros of those outside (DCNv2's rule). Elsewhere its weights are zero and
    # the top-left corner is clamped into that range, so every index stays in bounds.
    hw = ops.cast(ops.op("Gather", "x_sizes", [xshape, ops.const("i_sizes", [2, 3])], np.int64, {"axis": 0}),
                  "x_sizes_float", sdt)
    top_y, inside_y, frac_y = _axis(ops, pos, 0, ops.op("Gather", "x_h", [hw, ops.const("ih", [0])], sdt,
                                                              {"axis": 0}), "y", sdt)
    top_x, inside_x, frac_x = _axis(ops, pos, 1, ops.op("Gather", "x_w", [hw, ops.const("iw", [1])], sdt,
                                                              {"axis": 0}), "x", sdt)
    index = _corner_rows(ops, top_y, top_x, xshape, dg)
    wts = _corner_weights(ops, _side_weights(ops, frac_y, inside_y, CORNER_DOWN, "y", sdt),
                          _side_weights(ops, frac_x, inside_x, CORNER_RIGHT, "x", sdt), io.mask, dg, k, ohw, sdt, xdt)
    # 3. gather and blend: the im2col columns, channels last, [N, OH, OW, K, dg, C/dg]
    padded_x = ops.op("Pad", "x_padded", [x, ops.const("pads", [0, 0, 1, 1, 0, 0, 1, 1])], xdt, {"mode": "constant"})
    rows = ops.reshape(ops.op("Transpose", "x_channels_last", [padded_x], xdt, {"perm": [0, 2, 3, 1]}), "x_rows",
                       [-1, c // dg], xdt)
    corners = ops.op("Gather", "sample", [rows, index], xdt, {"axis": 0})  # [N, OH, OW, K, dg, 4, C/dg]
    # opset 13's ReduceSum (axes an input): written for the raised opset, like Range
    blended = ops.op("ReduceSum", "blend", [ops.op("Mul", "weigh", [corners, wts], xdt), ops.const("i5", [5])], xdt,
                     {"keepdims": 0}, domain=PENDING_DOMAIN)
    # 4. the dense product
    _product(ops, io, blended, out, xshape, ohw, p.group, c, k, xdt)


def _product(ops: _Ops, io: DcnInputs, blended: gs.Tensor, out: gs.Tensor, xshape: gs.Tensor, ohw: gs.Tensor,
             group: int, c: int, k: int, xdt: np.dtype) -> None:
    """``out`` from the columns: a Gemm over ``[N*OH*OW, K*C]`` then NCHW, or with ``group > 1`` the
    columns channel-first for a grouped 1x1 Conv. The batch is read from ``x`` rather than left
    at -1, so that shape inference sees the output's shape (the graph proof is cut there)."""
    em, weight, bias = ops.em, io.weight, io.bias
    batch1 = ops.op("Gather", "x_n1", [xshape, ops.const("i0n", [0])], np.int64, {"axis": 0})
    if group == 1:
        cols = ops.reshape(blended, "im2col", [-1, k * c], xdt)
        if isinstance(weight, gs.Constant):
            values = np.asarray(weight.values)
            wk: gs.Tensor = em.const("weight_kc", np.ascontiguousarray(values.transpose(2, 3, 1, 0).reshape(k * c, -1)))
        else:
            wk = ops.reshape(ops.op("Transpose", "weight_taps_first", [weight], weight.dtype, {"perm": [2, 3, 1, 0]}),
                             "weight_kc", [k * c, -1], weight.dtype)
        prod = ops.op("Gemm", "product", [cols, wk] + ([bias] if bias is not None else []), xdt)
        cout = ops.op("Gather", "cout", [ops.op("Shape", "weight_dims", [weight], np.int64), ops.const("i0c", [0])],
                      np.int64, {"axis": 0})
        prod = ops.reshape(prod, "product_image", [batch1, ohw, cout], xdt)  # [N, OH, OW, Cout]
        em.node("Transpose", "output", [prod], [out], {"perm": [0, 3, 1, 2]})
        return
    # grouped: the columns to [N, C*K, OH, OW] (channel c*K + k) and a grouped 1x1 Conv
    cols = ops.reshape(blended, "columns_taps", [0, 0, 0, k, c], xdt)
    cols = ops.reshape(ops.op("Transpose", "columns_first", [cols], xdt, {"perm": [0, 4, 3, 1, 2]}), "im2col",
                       [batch1, c * k, ohw], xdt)
    if isinstance(weight, gs.Constant):
        values = np.asarray(weight.values)
        w2: gs.Tensor = em.const("weight_1x1", np.ascontiguousarray(values.reshape(values.shape[0], -1, 1, 1)))
    else:
        w2 = ops.reshape(weight, "weight_1x1", [0, -1, 1, 1], weight.dtype)
    ins = [cols, w2] + ([bias] if bias is not None else [])
    em.node("Conv", "conv1x1", ins, [out], {"kernel_shape": [1, 1], "group": group, "strides": [1, 1],
                                            "pads": [0, 0, 0, 0], "dilations": [1, 1]})


def with_dcn_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with a value_info ``[N, Cout, OH, OW]`` for every DCN output shape inference
    cannot see past (a custom op), repeated until shapes stop growing: the portable form of
    a DCN behind another (DCN → BN → ReLU → DCN) needs its input's channel count."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for _ in range(sum(1 for n in out.graph.node if dialect_of(n.domain, n.op_type)) + 1):
        try:
            inferred = onnx.shape_inference.infer_shapes(out, data_prop=True)
        except Exception:  # custom ops inference cannot handle: keep what is known
            return out
        shapes, dtypes = value_shapes(inferred), value_dtypes(inferred)
        added = False
        for node in gs.import_onnx(inferred).nodes:
            if dialect_of(node.domain, node.op) is None or not node.outputs:
                continue
            y = node.outputs[0].name
            dcn = read_any(node)
            xs, ws = shapes.get(dcn.x) if dcn else None, shapes.get(dcn.weight) if dcn else None
            if dcn is None or y in shapes or not xs or not ws or len(xs) != 4 or len(ws) != 4 or dcn.kernel is None:
                continue
            h, w = xs[2], xs[3]
            if isinstance(h, int) and isinstance(w, int):
                dims: list[Any] = [xs[0], ws[0], *dcn.params.out_hw(h, w, *dcn.kernel)]
            else:  # dynamic: the offset's dims (symbolic or unknown), the channel count still known
                offs = shapes.get(dcn.offset) or [None] * 4
                dims = [xs[0], ws[0], offs[2] if len(offs) == 4 else None, offs[3] if len(offs) == 4 else None]
            out.graph.value_info.append(helper.make_tensor_value_info(y, dtypes.get(dcn.x, 1), dims))
            added = True
        if not added:
            break
    return out


# The portable form samples at float32 positions, whose error grows with the feature map like
# every float32 DCN's (ONNX Runtime's DeformConv reaches the 1e-5 tolerance near 200x200 on
# random data); its graph holds no spatial size, so its proof runs at most this wide, where
# float32 positions are exact to well under the tolerance.
PROOF_SIDE = 64

PORTABLE = DcnTarget(TARGET, emit, opset=OPSET, opset_op="ReduceSum", pads="taps", proof_max_side=PROOF_SIDE,
                     cut_graph_proof=True, prepare=with_dcn_output_shapes)
