"""DCNv2 in its three dialects, read into one form and written out for one of three targets.

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

Targets:

* ``deformconv``: standard ONNX ``DeformConv``; TensorRT >= 10.1 imports it through its
  ModulatedDeformConv2d plugin; ONNX Runtime >= 1.31 runs it (the proof).
* ``trt-plugin``: a ``ModulatedDeformConv2d`` plugin node, plugin_version "2", inputs
  x, offset, mask, weight[, bias], the five INT fields (stride, padding, dilation, group,
  deformable_group) all present; a ones mask is synthesized when the source has none.
* ``trtconv-plugin``: trtconv's own DCNv2 plugin, described by its spec file.
* ``portable``: standard ONNX operators only (GridSample sampling, a 1x1 Conv), no plugin
  at all (TensorRT-RTX); see :mod:`trtconv.rewrites.dcn_portable`.

TensorRT needs symmetric pads: asymmetric ones become an explicit zero ``Pad`` of the
input plus the symmetric remainder, which samples exactly the same values (bilinear
sampling treats outside pixels as zeros).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.errors import UnsupportedModelError, UsageError
from trtconv.rewrites.pluginmap import PLUGIN_DOMAIN, read_document
from trtconv.rewrites.reference import DcnParams

TARGETS = ("deformconv", "trt-plugin", "trtconv-plugin", "portable")  # portable: dcn_portable.py
DEFAULT_TARGET = "deformconv"

# DeformConv nodes are emitted in this private domain first and moved to the default
# domain after the model's opset has been raised to 19 (onnx's version converter
# refuses DeformConv itself and unknown default-domain ops).
PENDING_DOMAIN = "trtconv.pending"
DEFORMCONV_OPSET = 19

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


def _shape(t: gs.Tensor | None) -> tuple[Any, ...] | None:
    if t is None:
        return None
    if isinstance(t, gs.Constant):
        return tuple(t.shape)
    return tuple(t.shape) if t.shape is not None else None


def _kernel(node: gs.Node, weight: gs.Tensor | None, attr: str | None) -> tuple[int, int] | None:
    shp = _shape(weight)
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


def read_dcn(node: gs.Node) -> DcnNode | None:
    """The node as a :class:`DcnNode`, or None if it is not a 2-D deformable convolution."""
    ins = node.inputs
    if node.op == "DCNv2":
        if len(ins) < 4:
            raise UnsupportedModelError(f"node {node.name!r} (DCNv2) has {len(ins)} inputs, expected 4 or 5")
        weight = ins[3]
        wshape = _shape(weight)
        xshape = _shape(ins[0])
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
        dcn = DcnNode("centernet", _name(ins, 0), _name(ins, 1), _name(ins, 2), _name(ins, 3), _name(ins, 4),
                      params, _kernel(node, weight, None), _unknown_attrs(node, known))
    elif node.op == "MMCVModulatedDeformConv2d":
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
        dcn = DcnNode("mmcv", _name(ins, 0), _name(ins, 1), _name(ins, 2), _name(ins, 3), _name(ins, 4),
                      params, _kernel(node, ins[3], None), _unknown_attrs(node, known))
    elif node.op == "DeformConv":
        if len(ins) < 3:
            raise UnsupportedModelError(f"node {node.name!r} (DeformConv) has {len(ins)} inputs, expected 3 to 5")
        strides = _ints(node.attrs.get("strides", [1, 1]))
        if len(strides) != 2 or len(_ints(node.attrs.get("kernel_shape", [1, 1]))) != 2:
            return None  # 1-D: TensorRT imports it natively; nothing to do
        wshape = _shape(ins[1])
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
        dcn = DcnNode("onnx", _name(ins, 0), _name(ins, 2), _name(ins, 4), _name(ins, 1), _name(ins, 3),
                      params, _kernel(node, ins[1], "kernel_shape"), _unknown_attrs(node, known))
    else:
        return None
    _check(node, dcn.params)
    return dcn


def symmetric_split(pads: tuple[int, int, int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """(symmetric part (h, w), extra explicit padding (top, left, bottom, right))."""
    t, left, b, r = pads
    sh, sw = min(t, b), min(left, r)
    return (sh, sw), (t - sh, left - sw, b - sh, r - sw)


@dataclass(frozen=True)
class PluginSpec:
    """What a DCN plugin node must look like for TensorRT's fallback importer to build it."""

    name: str
    version: str
    namespace: str
    # input order, by role: x, offset, mask, weight, bias
    inputs: tuple[str, ...]
    # (field name, role); role in stride, padding ([h, w], symmetric), pads ([t, l, b, r]),
    # dilation, group, deformable_group
    fields: tuple[tuple[str, str], ...]
    # attributes with a fixed value (e.g. the trtconv plugin's aot=1, allow_tf32)
    constants: tuple[tuple[str, Any], ...] = ()
    mask_required: bool = True
    bias_required: bool = False
    weight_layout: str = "OIHW"  # or "OHWI"
    max_kernel_taps: int | None = None  # kh*kw limit the plugin states, if any
    domain: str = PLUGIN_DOMAIN
    source: str = "TensorRT libnvinfer_plugin"

    @property
    def symmetric_pads(self) -> bool:
        return any(role == "padding" for _, role in self.fields)


TRT_MODULATED_DEFORM_CONV = PluginSpec(
    name="ModulatedDeformConv2d",
    version="2",
    namespace="",
    inputs=("x", "offset", "mask", "weight", "bias"),
    fields=(("stride", "stride"), ("padding", "padding"), ("dilation", "dilation"), ("group", "group"),
            ("deformable_group", "deformable_group")),
)

ROLES = ("x", "offset", "mask", "weight", "bias")
FIELD_ROLES = ("stride", "padding", "pads", "dilation", "group", "deformable_group")


def field_value(role: str, params: DcnParams) -> list[int] | int:
    (ph, pw), _ = symmetric_split(params.pads)
    values: dict[str, list[int] | int] = {
        "stride": list(params.stride),
        "padding": [ph, pw],
        "pads": list(params.pads),
        "dilation": list(params.dilation),
        "group": params.group,
        "deformable_group": params.deformable_group,
    }
    return values[role]


def load_plugin_spec(path: str | os.PathLike[str]) -> PluginSpec:
    """Read a DCN plugin's machine-readable spec (plugins/dcnv2/spec.json; JSON or YAML)."""

    path = Path(path)
    doc = read_document(path, "DCN plugin spec")
    try:
        plugin, node = doc["plugin"], doc.get("onnx_node", {})
        inputs = sorted(doc["inputs"], key=lambda d: int(d["index"]))
        roles = tuple(str(d["name"]) for d in inputs)
        if set(roles) - set(ROLES) or not {"x", "offset", "weight"} <= set(roles):
            raise ValueError(f"inputs {roles} are not a subset of {ROLES} with x, offset, weight")
        by_role = {str(d["name"]): d for d in inputs}
        fields: list[tuple[str, str]] = []
        constants: list[tuple[str, Any]] = []
        for a in doc["attributes"]:
            name = str(a["name"])
            if name in FIELD_ROLES:
                fields.append((name, name))
            elif "default" in a:
                constants.append((name, a["default"]))
            else:
                raise ValueError(f"attribute {name!r} has no known role and no default")
        for k, v in sorted(node.get("required_attributes", {}).items()):
            constants.append((str(k), v))
        missing = {"stride", "dilation", "group", "deformable_group"} - {r for _, r in fields}
        if missing or not {"padding", "pads"} & {r for _, r in fields}:
            raise ValueError(f"attributes lack {sorted(missing) or ['pads']}")
        weight_layout = str(by_role["weight"].get("layout", "OIHW")).upper()
        if weight_layout not in ("OIHW", "OHWI"):
            raise ValueError(f"weight layout {weight_layout!r} is neither OIHW nor OHWI")
        taps = re.search(r"kh\s*\*\s*kw\s*<=\s*(\d+)", str(doc.get("limits", {}).get("kernel_taps", "")))
        return PluginSpec(
            max_kernel_taps=int(taps.group(1)) if taps else None,
            name=str(node.get("op_type") or plugin["name"]),
            version=str(plugin.get("version", "1")),
            namespace=str(plugin.get("namespace", "")),
            inputs=roles,
            fields=tuple(fields),
            constants=tuple(constants),
            mask_required="mask" in by_role,
            bias_required="bias" in by_role,
            weight_layout=weight_layout,
            domain=str(node.get("domain") or plugin.get("namespace") or PLUGIN_DOMAIN),
            source=str(path),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"DCN plugin spec {path} is not usable: {type(exc).__name__}: {exc}",
            hint="see docs/rewrite.md (target trtconv-plugin) for the fields trtconv reads",
        ) from exc


def default_plugin_spec_path() -> Path:
    """Where trtconv's own DCNv2 plugin keeps its spec in a source checkout."""
    return Path(__file__).resolve().parents[2] / "plugins" / "dcnv2" / "spec.json"


class Emitter:
    """Builds replacement nodes with unique, deterministic names derived from the original node."""

    def __init__(self, graph: gs.Graph, base: str) -> None:
        self.graph = graph
        self.base = base
        self.nodes: list[gs.Node] = []

    def var(self, suffix: str, dtype: Any = None, shape: Any = None) -> gs.Variable:
        return gs.Variable(f"{self.base}/{suffix}", dtype=dtype, shape=shape)

    def const(self, suffix: str, values: np.ndarray) -> gs.Constant:
        return gs.Constant(f"{self.base}/{suffix}", values)

    def node(self, op: str, suffix: str, inputs: list[gs.Tensor], outputs: list[gs.Tensor],
             attrs: Mapping[str, Any] | None = None, domain: str | None = None) -> gs.Node:
        n = gs.Node(op, name=f"{self.base}/{suffix}", attrs=dict(attrs or {}), inputs=inputs, outputs=outputs,
                    domain=domain)
        self.nodes.append(n)
        return n


def _padded_input(em: Emitter, x: gs.Tensor, extra: tuple[int, int, int, int]) -> gs.Tensor:
    if not any(extra):
        return x
    t, left, b, r = extra
    amounts = em.const("pad_amounts", np.array([0, 0, t, left, 0, 0, b, r], dtype=np.int64))
    out = em.var("padded_input", dtype=x.dtype)
    em.node("Pad", "pad", [x, amounts], [out], {"mode": "constant"})
    return out


def _ones_mask(em: Emitter, offset: gs.Tensor, channels: int, dtype: Any) -> gs.Tensor:
    """A mask of ones shaped like the offset but with ``channels`` channels (dynamic shapes kept)."""
    shape = em.var("offset_shape", dtype=np.int64)
    em.node("Shape", "offset_shape", [offset], [shape])
    n = em.var("offset_batch", dtype=np.int64)
    em.node("Slice", "offset_batch", [shape, em.const("s0", np.array([0], np.int64)),
                                      em.const("e1", np.array([1], np.int64))], [n])
    hw = em.var("offset_hw", dtype=np.int64)
    em.node("Slice", "offset_hw", [shape, em.const("s2", np.array([2], np.int64)),
                                   em.const("e4", np.array([4], np.int64))], [hw])
    mshape = em.var("mask_shape", dtype=np.int64)
    em.node("Concat", "mask_shape", [n, em.const("mask_channels", np.array([channels], np.int64)), hw],
            [mshape], {"axis": 0})
    mask = em.var("ones_mask", dtype=dtype)
    np_dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float32)
    one = gs.Constant(f"{em.base}/one", np.ones([1], dtype=np_dtype))  # a TENSOR attribute, as ONNX wants
    em.node("ConstantOfShape", "ones_mask", [mshape], [mask], {"value": one})
    return mask


def emit(
    graph: gs.Graph,
    name: str,
    dcn: DcnNode,
    target: str,
    tensors: Mapping[str, gs.Tensor],
    outputs: list[gs.Tensor],
    plugin: PluginSpec | None = None,
) -> list[gs.Node]:
    """Replacement nodes writing ``outputs`` (the caller has disconnected the original node first)."""
    em = Emitter(graph, name)
    x = tensors[dcn.x]
    offset = tensors[dcn.offset]
    weight = tensors[dcn.weight]
    mask = tensors[dcn.mask] if dcn.mask else None
    bias = tensors[dcn.bias] if dcn.bias else None
    (ph, pw), extra = symmetric_split(dcn.params.pads)
    outputs = list(outputs[:1])
    spec = plugin if plugin is not None else TRT_MODULATED_DEFORM_CONV
    if target != "deformconv" and spec.max_kernel_taps and dcn.kernel and \
            dcn.kernel[0] * dcn.kernel[1] > spec.max_kernel_taps:
        raise UnsupportedModelError(
            f"node {name!r}: kernel {dcn.kernel[0]}x{dcn.kernel[1]} exceeds the {spec.name} plugin's limit of "
            f"{spec.max_kernel_taps} taps", hint="use --dcn-target deformconv or trt-plugin")
    # TensorRT's importer and its plugin take symmetric pads only; trtconv's plugin takes all four
    xin = _padded_input(em, x, extra) if target == "deformconv" or spec.symmetric_pads else x
    if target == "deformconv":
        attrs: dict[str, Any] = {
            "strides": list(dcn.params.stride),
            "pads": [ph, pw, ph, pw],
            "dilations": list(dcn.params.dilation),
            "group": dcn.params.group,
            "offset_group": dcn.params.deformable_group,
        }
        if dcn.kernel:
            attrs["kernel_shape"] = list(dcn.kernel)
        ins: list[gs.Tensor] = [xin, weight, offset]
        if bias is not None or mask is not None:
            ins.append(bias if bias is not None else gs.Variable.empty())
        if mask is not None:
            ins.append(mask)
        em.node("DeformConv", "deformconv", ins, outputs, attrs, domain=PENDING_DOMAIN)
        return em.nodes
    if mask is None and spec.mask_required:
        if dcn.kernel is None:
            raise UnsupportedModelError(
                f"node {name!r}: kernel size unknown, cannot build the mask the plugin needs",
                hint="make the weight an initializer or give --shapes so shapes can be inferred",
            )
        k = dcn.kernel[0] * dcn.kernel[1] * dcn.params.deformable_group
        mask = _ones_mask(em, offset, k, x.dtype)
    if bias is None and spec.bias_required:
        cout = _shape(weight)
        if not cout or not isinstance(cout[0], int):
            raise UnsupportedModelError(f"node {name!r}: output channels unknown, cannot build a zero bias",
                                        hint="make the weight an initializer")
        wdtype = np.dtype(weight.dtype) if weight.dtype is not None else np.dtype(np.float32)
        bias = em.const("zero_bias", np.zeros([int(cout[0])], dtype=wdtype))
    if spec.weight_layout == "OHWI":
        if isinstance(weight, gs.Constant):
            weight = em.const("weight_ohwi", np.ascontiguousarray(np.transpose(np.asarray(weight.values),
                                                                               (0, 2, 3, 1))))
        else:
            wt = em.var("weight_ohwi", dtype=weight.dtype)
            em.node("Transpose", "weight_ohwi", [weight], [wt], {"perm": [0, 2, 3, 1]})
            weight = wt
    by_role: dict[str, gs.Tensor | None] = {"x": xin, "offset": offset, "mask": mask, "weight": weight,
                                            "bias": bias}
    plugin_inputs: list[gs.Tensor] = [by_role[r] or gs.Variable.empty() for r in spec.inputs]
    while plugin_inputs and plugin_inputs[-1].name == "":
        plugin_inputs.pop()
    pattrs: dict[str, Any] = {name: field_value(role, dcn.params) for name, role in spec.fields}
    for name, value in spec.constants:
        pattrs[name] = value
    pattrs["plugin_version"] = spec.version
    pattrs["plugin_namespace"] = spec.namespace
    em.node(spec.name, "plugin", plugin_inputs, outputs, pattrs, domain=spec.domain)
    return em.nodes
