"""DCNv2 in its three dialects, each read into one dialect-free form (:class:`DcnNode`).

Dialects (inputs → attributes):

* CenterNet ``DCNv2`` (default domain): X, offset, mask, W, B → stride, padding,
  dilation, deformable_groups (ints or pairs; no groups: the CUDA kernel has none).
* mmcv ``MMCVModulatedDeformConv2d`` (domain ``mmcv``/``mmdeploy``): X, offset, mask,
  W[, B] → stride, padding, dilation, groups, deform_groups.
* ONNX ``DeformConv`` (opset 19): X, W, offset[, B[, mask]] → strides, pads
  ([begin..., end...]), dilations, group, offset_group, kernel_shape.

All three use the same offset layout: (dy, dx) interleaved per kernel point,
deformable group major (ONNX's reference reshapes offset to (N, G, kh, kw, 2, oh, ow);
ONNX Runtime 1.31 agrees, see tests). So no dialect needs its offsets permuted.

A new dialect is a reader here and one more :class:`Dialect` in :data:`DIALECTS`: the
catalog makes a rewrite rule of every entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.errors import UnsupportedModelError
from trtconv.onnxutil import normalize_domain
from trtconv.rewrites.dcn.deform_math import DcnParams

# Attributes that carry no semantics in the wild (names exporters add).
_HARMLESS = {"name", "info", "kernel_size", "plugin_version", "plugin_namespace", "im2col_step",
             "deform_conv_type", "use_bias", "with_bias"}


@dataclass(frozen=True)
class DcnNode:
    """One deformable convolution, dialect-free. Input entries are tensor names ("" = absent)."""

    dialect: str  # "centernet" | "mmcv" | "onnx"
    x: str
    offset: str
    mask: str
    weight: str
    bias: str
    params: DcnParams
    kernel: tuple[int, int] | None
    notes: tuple[str, ...] = ()


def _ints(value: Any) -> list[int]:
    if isinstance(value, (list, tuple, np.ndarray)):
        return [int(v) for v in value]
    return [int(value)]


def _pair(node: gs.Node, names: Sequence[str], default: int) -> tuple[int, int]:
    for name in names:
        if name in node.attrs:
            vals = _ints(node.attrs[name])
            if len(vals) == 1:
                return vals[0], vals[0]
            if len(vals) == 2:
                return vals[0], vals[1]
            raise UnsupportedModelError(
                f"node {node.name!r} ({node.op}): attribute {name!r} has {len(vals)} values, expected 1 or 2",
                hint="only 2-D deformable convolutions can be rewritten",
            )
    return default, default


def _int(node: gs.Node, names: Sequence[str], default: int) -> int:
    for name in names:
        if name in node.attrs:
            vals = _ints(node.attrs[name])
            if len(vals) != 1:
                raise UnsupportedModelError(f"node {node.name!r} ({node.op}): attribute {name!r} must be one int")
            return vals[0]
    return default


def _name(tensors: Sequence[gs.Tensor], i: int) -> str:
    return tensors[i].name if i < len(tensors) and tensors[i] is not None else ""


def tensor_shape(t: gs.Tensor | None) -> tuple[Any, ...] | None:
    if t is None:
        return None
    if isinstance(t, gs.Constant):
        return tuple(t.shape)
    return tuple(t.shape) if t.shape is not None else None


def _kernel(node: gs.Node, weight: gs.Tensor | None, attr: str | None) -> tuple[int, int] | None:
    shp = tensor_shape(weight)
    if shp is not None and len(shp) == 4 and all(isinstance(d, int) for d in shp[2:]):
        return int(shp[2]), int(shp[3])
    if attr and attr in node.attrs:
        ks = _ints(node.attrs[attr])
        if len(ks) == 2:
            return ks[0], ks[1]
    return None


def _check(node: gs.Node, p: DcnParams) -> None:
    bad = [f for f, v in (("stride", p.stride), ("dilation", p.dilation)) if min(v) < 1]
    if min(p.pads) < 0:
        bad.append("padding")
    if p.group < 1:
        bad.append("group")
    if p.deformable_group < 1:
        bad.append("deformable_group")
    if bad:
        raise UnsupportedModelError(
            f"node {node.name!r} ({node.op}): invalid {', '.join(bad)} in {p}",
            hint="the exporter wrote impossible attributes; re-export the model",
        )


def _unknown_attrs(node: gs.Node, known: set[str]) -> tuple[str, ...]:
    extra = sorted(set(node.attrs) - known - _HARMLESS)
    return (f"ignored attributes: {', '.join(extra)}",) if extra else ()


def read_centernet(node: gs.Node) -> DcnNode:
    ins = node.inputs
    if len(ins) < 4:
        raise UnsupportedModelError(f"node {node.name!r} (DCNv2) has {len(ins)} inputs, expected 4 or 5")
    weight = ins[3]
    wshape = tensor_shape(weight)
    xshape = tensor_shape(ins[0])
    group = _int(node, ("groups", "group"), 0)
    if not group:
        group = 1
        if (wshape and xshape and len(xshape) == 4 and len(wshape) >= 2 and isinstance(xshape[1], int)
                and isinstance(wshape[1], int)):
            group = max(1, xshape[1] // max(1, wshape[1]))
    ph, pw = _pair(node, ("padding", "pad", "pads"), 0)
    params = DcnParams(
        stride=_pair(node, ("stride", "strides"), 1),
        pads=(ph, pw, ph, pw),
        dilation=_pair(node, ("dilation", "dilations"), 1),
        group=group,
        deformable_group=_int(node, ("deformable_groups", "deformable_group", "deform_groups"), 1),
    )
    known = {"stride", "strides", "padding", "pad", "pads", "dilation", "dilations", "groups", "group",
             "deformable_groups", "deformable_group", "deform_groups"}
    return DcnNode("centernet", _name(ins, 0), _name(ins, 1), _name(ins, 2), _name(ins, 3), _name(ins, 4),
                   params, _kernel(node, weight, None), _unknown_attrs(node, known))


def read_mmcv(node: gs.Node) -> DcnNode:
    ins = node.inputs
    if len(ins) < 4:
        raise UnsupportedModelError(
            f"node {node.name!r} (MMCVModulatedDeformConv2d) has {len(ins)} inputs, expected 4 or 5")
    ph, pw = _pair(node, ("padding",), 0)
    params = DcnParams(
        stride=_pair(node, ("stride",), 1),
        pads=(ph, pw, ph, pw),
        dilation=_pair(node, ("dilation",), 1),
        group=_int(node, ("groups", "group"), 1),
        deformable_group=_int(node, ("deform_groups", "deformable_groups", "deformable_group"), 1),
    )
    known = {"stride", "padding", "dilation", "groups", "group", "deform_groups", "deformable_groups",
             "deformable_group"}
    return DcnNode("mmcv", _name(ins, 0), _name(ins, 1), _name(ins, 2), _name(ins, 3), _name(ins, 4),
                   params, _kernel(node, ins[3], None), _unknown_attrs(node, known))


def read_onnx(node: gs.Node) -> DcnNode | None:
    ins = node.inputs
    if len(ins) < 3:
        raise UnsupportedModelError(f"node {node.name!r} (DeformConv) has {len(ins)} inputs, expected 3 to 5")
    strides = _ints(node.attrs.get("strides", [1, 1]))
    if len(strides) != 2 or len(_ints(node.attrs.get("kernel_shape", [1, 1]))) != 2:
        return None  # 1-D: TensorRT imports it natively; nothing to do
    wshape = tensor_shape(ins[1])
    if wshape is not None and len(wshape) != 4:
        return None
    pads = _ints(node.attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4:
        raise UnsupportedModelError(f"node {node.name!r} (DeformConv): pads has {len(pads)} values, expected 4")
    params = DcnParams(
        stride=(strides[0], strides[1]),
        pads=(pads[0], pads[1], pads[2], pads[3]),
        dilation=_pair(node, ("dilations",), 1),
        group=_int(node, ("group",), 1),
        deformable_group=_int(node, ("offset_group",), 1),
    )
    known = {"strides", "pads", "dilations", "group", "offset_group", "kernel_shape"}
    return DcnNode("onnx", _name(ins, 0), _name(ins, 2), _name(ins, 4), _name(ins, 1), _name(ins, 3),
                   params, _kernel(node, ins[1], "kernel_shape"), _unknown_attrs(node, known))


@dataclass(frozen=True)
class Dialect:
    """One way exporters write a deformable convolution: the ops it appears as and its reader."""

    rule: str  # stable rule id, used in reports and JSON
    description: str
    ops: tuple[tuple[str, str], ...]  # (domain, op_type); "" is ONNX's default domain
    read: Callable[[gs.Node], DcnNode | None]  # None: not a 2-D deformable convolution after all
    native_target: str | None = None  # the target it already is: left alone when its pads are symmetric

    def read_checked(self, node: gs.Node) -> DcnNode | None:
        dcn = self.read(node)
        if dcn is not None:
            _check(node, dcn.params)
        return dcn


CENTERNET = Dialect("dcnv2-centernet", "CenterNet DCNv2 -> DeformConv (or a DCNv2 plugin node)",
                    (("", "DCNv2"),), read_centernet)
MMCV = Dialect("dcnv2-mmcv", "mmcv MMCVModulatedDeformConv2d -> DeformConv (or a DCNv2 plugin node)",
               (("mmcv", "MMCVModulatedDeformConv2d"), ("", "MMCVModulatedDeformConv2d"),
                ("mmdeploy", "MMCVModulatedDeformConv2d")),  # mmdeploy's export of the same op
               read_mmcv)
ONNX_DEFORMCONV = Dialect("deformconv",
                          "ONNX DeformConv with asymmetric pads -> Pad + DeformConv (or a DCNv2 plugin node)",
                          (("", "DeformConv"),), read_onnx, native_target="deformconv")

DIALECTS: tuple[Dialect, ...] = (CENTERNET, MMCV, ONNX_DEFORMCONV)


def dialect_of(domain: str | None, op_type: str) -> Dialect | None:
    key = (normalize_domain(domain), op_type)
    return next((d for d in DIALECTS if key in d.ops), None)


def read_any(node: gs.Node) -> DcnNode | None:
    """The node as a :class:`DcnNode` whatever its dialect; None if it is no deformable convolution."""
    dialect = dialect_of(node.domain, node.op)
    return dialect.read_checked(node) if dialect is not None else None
