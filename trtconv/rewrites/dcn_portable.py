"""DCNv2 as standard ONNX operators only: the ``portable`` DCN target.

For runtimes with no plugins (TensorRT-RTX) and users who cannot ship a plugin library.
Every op emitted is one TensorRT's ONNX parser imports natively; the computation is
deformable convolution written out as sampling then a dense product (im2col):

1. ``x [N, C, H, W]`` → ``[N*G, C/G, H, W]`` (``G`` = deformable groups; skipped when 1).
2. Sampling grid from the offsets: the (dy, dx) pairs are swapped to GridSample's (x, y)
   order by one ``Gather`` over the offset channels, scaled to normalised units and added
   to the (constant) normalised position of every kernel tap at every output pixel,
   ``[N*G, K*OH, OW, 2]`` with ``K = kh*kw``.
3. ``GridSample`` (bilinear, ``padding_mode="zeros"``, ``align_corners=0``): pixel ``p`` is
   normalised as ``(2p + 1)/W - 1``, which ``align_corners=0`` maps back to ``p``; corners
   outside the image count as zeros, exactly as DCNv2 defines its border. Output
   ``[N*G, C/G, K*OH, OW]``: the im2col columns.
4. Mask multiply (``[N*G, 1, K*OH, OW]``, broadcast over channels), when there is a mask.
5. The columns reshaped to ``[N, C*K, OH, OW]`` (channel ``c*K + k``) and a 1x1 ``Conv``
   with the weight reshaped ``[Cout, C/group*K, 1, 1]`` and ``group`` groups, plus bias.

Spatial sizes must be static (the tap positions and the normalisation are constants);
the batch may stay dynamic (every ``Reshape`` puts ``-1`` there). Asymmetric pads need no
``Pad``: they only move the tap positions.

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
from trtconv.load.shapes import value_dtypes, value_shapes
from trtconv.rewrites.catalog import rewrite_rule_for
from trtconv.rewrites.dcn import PENDING_DOMAIN, DcnNode, Emitter, read_dcn
from trtconv.rewrites.reference import DcnParams

TARGET = "portable"  # one of dcn.TARGETS
# GridSample entered the default domain at opset 16; it is emitted in the pending domain
# (see dcn.PENDING_DOMAIN) and the model's opset is raised to this when lower.
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


def tap_grid(params: DcnParams, kernel: tuple[int, int], hw: tuple[int, int], ohw: tuple[int, int],
             dtype: np.dtype) -> np.ndarray:
    """Normalised (x, y) of every kernel tap at every output pixel before offsets: ``[K, 2, OH, OW]``."""
    kh, kw = kernel
    h, w = hw
    oh, ow = ohw
    rows = np.arange(oh)[None, :] * params.stride[0] - params.pads[0] + np.arange(kh)[:, None] * params.dilation[0]
    cols = np.arange(ow)[None, :] * params.stride[1] - params.pads[1] + np.arange(kw)[:, None] * params.dilation[1]
    grid = np.empty((kh, kw, 2, oh, ow), dtype=np.float64)
    grid[:, :, 0] = ((2 * cols + 1) / w - 1)[None, :, None, :]  # x: varies with j and ow
    grid[:, :, 1] = ((2 * rows + 1) / h - 1)[:, None, :, None]  # y: varies with i and oh
    return grid.reshape(kh * kw, 2, oh, ow).astype(dtype)


def swap_pairs(channels: int) -> np.ndarray:
    """Gather indices turning (dy, dx) pairs into (dx, dy) pairs."""
    idx = np.arange(channels, dtype=np.int64).reshape(-1, 2)
    return np.ascontiguousarray(idx[:, ::-1]).reshape(-1)


def emit(graph: gs.Graph, name: str, dcn: DcnNode, tensors: Mapping[str, gs.Tensor],
         outputs: Sequence[gs.Tensor]) -> list[gs.Node]:
    """Replacement nodes writing ``outputs[0]`` (the caller has disconnected the original node first)."""
    em = Emitter(graph, name)
    x, offset, weight = tensors[dcn.x], tensors[dcn.offset], tensors[dcn.weight]
    mask = tensors[dcn.mask] if dcn.mask else None
    bias = tensors[dcn.bias] if dcn.bias else None
    p = dcn.params
    xs = _static(x.shape)
    if xs is None or dcn.kernel is None:
        raise UnsupportedModelError(
            f"node {em.base!r}: the portable DCN form needs static channel and spatial sizes of its input "
            f"(x has shape {list(x.shape) if x.shape is not None else 'unknown'}"
            f"{'' if dcn.kernel else ', kernel size unknown'})",
            hint="give --shapes INPUT:NxCxHxW (the batch may stay dynamic), or use another --dcn-target")
    c, h, w = xs
    kh, kw = dcn.kernel
    k = kh * kw
    dg, group = p.deformable_group, p.group
    oh, ow = p.out_hw(h, w, kh, kw)
    offs = _static(offset.shape)
    ws = _static(weight.shape)
    if (oh < 1 or ow < 1 or (offs is not None and offs != (2 * dg * k, oh, ow)) or c % dg or c % group
            or (ws is not None and ws[0] * group != c)):
        raise UnsupportedModelError(
            f"node {em.base!r}: shapes do not fit together: x {list(x.shape)}, offset "
            f"{list(offset.shape) if offset.shape is not None else '?'}, weight {list(weight.shape or [])}, {p}",
            hint="the offset must be [N, 2*deformable_group*kh*kw, OH, OW] for the convolution's output size")
    sdt = _float_dtype(x)
    low = sdt.itemsize < 4  # FP16/BF16: sample in FP32
    if low:
        sdt = np.dtype(np.float32)

    def cast(t: gs.Tensor, suffix: str, dtype: np.dtype) -> gs.Tensor:
        if _float_dtype(t) == dtype:
            return t
        out = em.var(suffix, dtype=dtype)
        em.node("Cast", suffix, [t], [out], {"to": int(helper.np_dtype_to_tensor_dtype(dtype))})
        return out

    def reshape(t: gs.Tensor, suffix: str, shape: list[int], dtype: Any) -> gs.Tensor:
        out = em.var(suffix, dtype=dtype)
        em.node("Reshape", suffix, [t, em.const(f"{suffix}_shape", np.array(shape, np.int64))], [out])
        return out

    # 1. the image, one batch entry per deformable group
    img = cast(x, "x_float", sdt)
    if dg > 1:
        img = reshape(img, "x_groups", [-1, c // dg, h, w], sdt)
    # 2. the sampling grid
    swapped = em.var("offset_xy", dtype=offset.dtype)
    em.node("Gather", "offset_xy", [offset, em.const("xy_order", swap_pairs(2 * dg * k))], [swapped], {"axis": 1})
    off = reshape(cast(swapped, "offset_float", sdt), "offset_taps", [-1, k, 2, oh, ow], sdt)
    scaled = em.var("offset_normalised", dtype=sdt)
    em.node("Mul", "offset_normalised", [off, em.const("xy_scale", np.array([2 / w, 2 / h], sdt).reshape(2, 1, 1))],
            [scaled])
    grid5 = em.var("grid_taps", dtype=sdt)
    em.node("Add", "grid_taps", [scaled, em.const("tap_positions", tap_grid(p, (kh, kw), (h, w), (oh, ow), sdt))],
            [grid5])
    grid_last = em.var("grid_xy_last", dtype=sdt)
    em.node("Transpose", "grid_xy_last", [grid5], [grid_last], {"perm": [0, 1, 3, 4, 2]})
    grid = reshape(grid_last, "grid", [-1, k * oh, ow, 2], sdt)
    # 3. bilinear sampling with zeros outside (mode left at its default: "bilinear" in
    # opset 16-19, renamed "linear" from opset 20; both mean the same)
    cols = em.var("columns", dtype=sdt)
    em.node("GridSample", "sample", [img, grid], [cols], {"align_corners": 0, "padding_mode": "zeros"},
            domain=PENDING_DOMAIN)
    xdt = _float_dtype(x)
    cols = cast(cols, "columns_cast", xdt)
    # 4. modulation
    if mask is not None:
        m = reshape(mask, "mask_taps", [-1, 1, k * oh, ow], mask.dtype)
        masked = em.var("columns_masked", dtype=xdt)
        em.node("Mul", "modulate", [cols, m], [masked])
        cols = masked
    # 5. the dense product
    cols = reshape(cols, "im2col", [-1, c * k, oh, ow], xdt)
    if isinstance(weight, gs.Constant):
        values = np.asarray(weight.values)
        w2: gs.Tensor = em.const("weight_1x1", np.ascontiguousarray(values.reshape(values.shape[0], -1, 1, 1)))
    else:
        w2 = reshape(weight, "weight_1x1", [0, -1, 1, 1], weight.dtype)
    ins = [cols, w2] + ([bias] if bias is not None else [])
    em.node("Conv", "conv1x1", ins, [outputs[0]], {"kernel_shape": [1, 1], "group": group, "strides": [1, 1],
                                                   "pads": [0, 0, 0, 0], "dilations": [1, 1]})
    return em.nodes


def with_dcn_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with a value_info ``[N, Cout, OH, OW]`` for every DCN output shape inference
    cannot see past (a custom op), repeated until shapes stop growing: the portable form of
    a DCN behind another (DCN → BN → ReLU → DCN) needs its input's sizes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for _ in range(sum(1 for n in out.graph.node if rewrite_rule_for(n.domain, n.op_type)) + 1):
        try:
            inferred = onnx.shape_inference.infer_shapes(out, data_prop=True)
        except Exception:  # custom ops inference cannot handle: keep what is known
            return out
        shapes, dtypes = value_shapes(inferred), value_dtypes(inferred)
        added = False
        for node in gs.import_onnx(inferred).nodes:
            if rewrite_rule_for(node.domain or "", node.op) is None or not node.outputs:
                continue
            y = node.outputs[0].name
            dcn = read_dcn(node)
            xs, ws = shapes.get(dcn.x) if dcn else None, shapes.get(dcn.weight) if dcn else None
            if dcn is None or y in shapes or not xs or not ws or len(xs) != 4 or len(ws) != 4 or dcn.kernel is None:
                continue
            h, w = xs[2], xs[3]
            if not isinstance(h, int) or not isinstance(w, int):
                continue
            oh, ow = dcn.params.out_hw(h, w, *dcn.kernel)
            dims: list[Any] = [xs[0], ws[0], oh, ow]
            out.graph.value_info.append(helper.make_tensor_value_info(y, dtypes.get(dcn.x, 1), dims))
            added = True
        if not added:
            break
    return out
