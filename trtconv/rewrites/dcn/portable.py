"""DCNv2 as standard ONNX operators only: the ``portable`` DCN target.

For runtimes with no plugins (TensorRT-RTX) and users who cannot ship a plugin library.
Every op emitted is one TensorRT's ONNX parser imports natively; the computation is
deformable convolution written out as sampling then a dense product (im2col):

1. ``x [N, C, H, W]`` → ``[N*G*S, C/(G*S), H, W]`` (``G`` = deformable groups, ``S`` = channel
   shares of each, see :func:`sample_split`; skipped when ``G*S`` is 1).
2. Sampling grid from the offsets: the (dy, dx) pairs are swapped to GridSample's (x, y)
   order by one ``Gather`` over the offset channels, added to the position of every kernel
   tap at every output pixel and normalised, ``[N*G, K*OH, OW, 2]`` with ``K = kh*kw`` (see
   :func:`_grid`), then ``Expand``-ed to one copy per channel share, ``[N*G*S, K*OH, OW, 2]``.
3. ``GridSample`` (bilinear, ``padding_mode="zeros"``, ``align_corners=0``): pixel ``p`` is
   normalised as ``(2p + 1)/W - 1``, which ``align_corners=0`` maps back to ``p``; corners
   outside the image count as zeros, exactly as DCNv2 defines its border. Output
   ``[N*G*S, C/(G*S), K*OH, OW]``, the memory of ``[N, C, K*OH, OW]``: the im2col columns.
4. Mask multiply (``[N*G, 1, K*OH, OW]``, broadcast over channels), when there is a mask.
5. The columns reshaped to ``[N, C*K, OH, OW]`` (channel ``c*K + k``) and a 1x1 ``Conv``
   with the weight reshaped ``[Cout, C/group*K, 1, 1]`` and ``group`` groups, plus bias.

The tap positions and the normalisation are computed from the offset's and the input's
run-time shape (``Shape``, ``Range``, a few element-wise nodes), so batch, height and width
may all be dynamic and the graph holds no spatial size; only the channel count must be
known. Asymmetric pads need no ``Pad``: they only move the taps.

FP16 models sample in FP32 (``x`` and the offsets are cast up, the columns cast back to
FP16 before the mask multiply): TensorRT's GridSample needs ``x`` and the grid in one
type, and FP16 normalised coordinates would lose ``W * 2^-12`` pixels of position.
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
# GridSample entered the default domain at opset 16; it is emitted in the pending domain
# (see emitter.PENDING_DOMAIN) and the model's opset is raised to this when lower.
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


def swap_pairs(channels: int) -> np.ndarray:
    """Gather indices turning (dy, dx) pairs into (dx, dy) pairs."""
    idx = np.arange(channels, dtype=np.int64).reshape(-1, 2)
    return np.ascontiguousarray(idx[:, ::-1]).reshape(-1)


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


# Channels one GridSample output location walks at most (see sample_split).
SAMPLE_CHANNELS = 32


def sample_split(channels: int, per_location: int = SAMPLE_CHANNELS) -> int:
    """Into how many batch entries one deformable group's ``channels`` are spread for GridSample.

    GridSample kernels run one thread per output location and loop over the channels (PyTorch's
    does, by its source): with few locations and many channels most of the GPU idles (layer (c)
    of the DCN benchmark has 9*32*32 locations of 512 channels). Spreading the channels over
    ``s`` batch entries, each with its own copy of the grid, gives ``s`` times the threads for
    ``s`` copies of the grid (two floats per location, against ``channels / s`` samples each).
    The largest ``s`` dividing ``channels`` that leaves at least ``per_location`` channels each.
    """
    return max((s for s in range(1, channels + 1) if channels % s == 0 and channels // s >= per_location),
               default=1)


def _grid(ops: _Ops, p: DcnParams, kernel: tuple[int, int], x: gs.Tensor, offset: gs.Tensor,
          off5: gs.Tensor, sdt: np.dtype) -> gs.Tensor:
    """Normalised grid ``[N*G, K, 2, OH, OW]``: ``(offset + (tap position + 0.5)) / (size/2) - 1``.

    Positions come from ``Range`` over the run-time OH and OW, sizes from ``Shape(x)``, so the
    graph holds no spatial size: it serves any size, and proving it at a small one proves it
    (TensorRT folds it to constants when the engine's shapes are static). The order of
    operations keeps rounding down: ``position + 0.5`` and ``size/2`` are exact, so a coordinate
    is rounded by the add and the divide, and the ``- 1`` is exact where the quotient lies in
    [0.5, 2], as GridSample's own ``+ 1`` then is; ``p*(2/W) + (1/W - 1)`` rounds twice as far
    from the float64 result at 120x120, and ``(offset + (p + 0.5 - size/2)) / (size/2)``, one
    node fewer, 1.2x as far at 256x256 (measured through ONNX Runtime's GridSample).
    """
    kh, kw = kernel
    wh = ops.op("Gather", "x_wh", [ops.op("Shape", "x_shape", [x], np.int64), ops.const("i32", [3, 2])], np.int64,
                {"axis": 0})
    half = ops.op("Mul", "xy_half_size_flat", [ops.cast(wh, "x_wh_float", sdt), ops.const("half", [0.5], sdt)], sdt)
    half = ops.reshape(half, "xy_half_size", [2, 1, 1], sdt)  # [W/2, H/2]: x first, as the grid
    oshape = ops.op("Shape", "offset_shape", [offset], np.int64)
    taps = np.arange(kh * kw)

    def centres(axis: int, stride: int, begin: int, tap_step: np.ndarray, name: str) -> gs.Tensor:
        """Pixel centre (position + 0.5) of every tap along one axis at every output index: [K, 1, 1, size]."""
        size = ops.op("Gather", f"o{name}", [oshape, ops.const(f"i{axis}", axis)], np.int64, {"axis": 0})
        index = ops.op("Range", f"o{name}_range", [ops.const(f"{name}_zero", 0), size, ops.const(f"{name}_step", 1)],
                       np.int64, domain=PENDING_DOMAIN)  # opset 11; written for the raised opset like GridSample
        pix = ops.op("Mul", f"o{name}_pixels", [ops.cast(index, f"o{name}_float", sdt),
                                                 ops.const(f"s{name}", [stride], sdt)], sdt)
        tap = ops.const(f"tap_{name}_offsets", (tap_step - begin + 0.5).reshape(-1, 1, 1, 1), sdt)
        return ops.op("Add", f"tap_{name}", [pix, tap], sdt)

    cols = centres(3, p.stride[1], p.pads[1], (taps % kw) * p.dilation[1], "x")  # [K, 1, 1, OW]
    rows = centres(2, p.stride[0], p.pads[0], (taps // kw) * p.dilation[0], "y")  # [K, 1, 1, OH]
    rows = ops.op("Transpose", "tap_y_column", [rows], sdt, {"perm": [0, 1, 3, 2]})  # [K, 1, OH, 1]
    px = ops.op("Mul", "tap_x_channel", [cols, ops.const("x_channel", [[[1]], [[0]]], sdt)], sdt)  # [K, 2, 1, OW]
    py = ops.op("Mul", "tap_y_channel", [rows, ops.const("y_channel", [[[0]], [[1]]], sdt)], sdt)  # [K, 2, OH, 1]
    # [K, 2, OH, OW], independent of the batch: one Add over the offsets instead of two (each
    # coordinate still gets one rounded add: px is 0 in the y channel, py 0 in the x channel)
    taps_pixels = ops.op("Add", "tap_pixels", [px, py], sdt)
    pix = ops.op("Add", "grid_pixels", [off5, taps_pixels], sdt)
    unit = ops.op("Div", "grid_units", [pix, half], sdt)
    return ops.op("Sub", "grid_taps", [unit, ops.const("one", [1.0], sdt)], sdt)


def emit(em: Emitter, dcn: DcnNode, io: DcnInputs, out: gs.Tensor, _spec: PluginSpec | None) -> None:
    """Replacement nodes writing ``out`` (the caller has disconnected the original node first)."""
    ops = _Ops(em)
    x, offset, weight, mask, bias = io.x, io.offset, io.weight, io.mask, io.bias
    p = dcn.params
    c = _check_shapes(em, dcn, x, offset, weight)
    assert dcn.kernel is not None  # _check_shapes says so
    kh, kw = dcn.kernel
    k = kh * kw
    dg, group = p.deformable_group, p.group
    sdt = _float_dtype(x)
    if sdt.itemsize < 4:  # FP16/BF16: sample in FP32
        sdt = np.dtype(np.float32)
    xdt = _float_dtype(x)
    # OH and OW as the offset has them at run time: the graph holds no spatial size
    ohw = ops.op("Gather", "offset_hw", [ops.op("Shape", "offset_dims", [offset], np.int64), ops.const("i23", [2, 3])],
                 np.int64, {"axis": 0})
    ow_t = ops.op("Gather", "offset_w", [ohw, ops.const("i1", [1])], np.int64, {"axis": 0})
    koh_t = ops.op("Mul", "taps_h", [ops.op("Gather", "offset_h", [ohw, ops.const("i0", [0])], np.int64, {"axis": 0}),
                                     ops.const("k", [k])], np.int64)

    split = sample_split(c // dg, SAMPLE_CHANNELS)
    entries = dg * split  # GridSample batch entries per image

    # 1. the image, one batch entry per deformable group and channel share
    img = ops.cast(x, "x_float", sdt)
    if entries > 1:
        img = ops.reshape(img, "x_groups", [-1, c // entries, 0, 0], sdt)
    # 2. the sampling grid
    swapped = ops.op("Gather", "offset_xy", [offset, ops.const("xy_order", swap_pairs(2 * dg * k))], offset.dtype,
                     {"axis": 1})
    off5 = ops.reshape(ops.cast(swapped, "offset_float", sdt), "offset_taps", [-1, k, 2, ohw], sdt)
    grid5 = _grid(ops, p, (kh, kw), x, offset, off5, sdt)
    grid_last = ops.op("Transpose", "grid_xy_last", [grid5], sdt, {"perm": [0, 1, 3, 4, 2]})
    if split > 1:  # the same grid for every channel share of a deformable group
        flat = ops.reshape(grid_last, "grid_flat", [0, 1, -1], sdt)
        grid_last = ops.op("Expand", "grid_shares", [flat, ops.const("shares", [1, split, 1])], sdt)
    grid = ops.reshape(grid_last, "grid", [-1, koh_t, ow_t, 2], sdt)
    # 3. bilinear sampling with zeros outside (mode left at its default: "bilinear" in
    # opset 16-19, renamed "linear" from opset 20; both mean the same)
    cols = ops.op("GridSample", "sample", [img, grid], sdt, {"align_corners": 0, "padding_mode": "zeros"},
                  domain=PENDING_DOMAIN)
    if mask is not None and split > 1:  # [N*dg, C/dg, K*OH, OW]: the mask's batch entries
        cols = ops.reshape(cols, "columns_groups", [-1, c // dg, koh_t, ow_t], sdt)
    cols = ops.cast(cols, "columns_cast", xdt)
    # 4. modulation
    if mask is not None:
        cols = ops.op("Mul", "modulate", [cols, ops.reshape(mask, "mask_taps", [-1, 1, koh_t, ow_t], mask.dtype)], xdt)
    # 5. the dense product
    cols = ops.reshape(cols, "im2col", [-1, c * k, ohw], xdt)
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


# The portable form samples through GridSample's normalised float32 coordinates, whose error
# grows with the feature map like every float32 DCN's (ONNX Runtime's DeformConv reaches the
# 1e-5 tolerance near 200x200 on random data); its graph holds no spatial size, so its proof
# runs at most this wide, where float32 positions are exact to well under the tolerance.
PROOF_SIDE = 64

PORTABLE = DcnTarget(TARGET, emit, opset=OPSET, opset_op="GridSample", pads="taps", proof_max_side=PROOF_SIDE,
                     cut_graph_proof=True, prepare=with_dcn_output_shapes)
