"""What a DCN becomes: the targets, as data. Each :class:`DcnTarget` names its emitter, how it
is proven and what it needs; ``--dcn-target`` chooses one by name from :data:`TARGETS`.

* ``deformconv``: standard ONNX ``DeformConv``; TensorRT >= 10.1 imports it through its
  ModulatedDeformConv2d plugin; ONNX Runtime >= 1.31 runs it (the proof).
* ``trt-plugin``: a ``ModulatedDeformConv2d`` plugin node, plugin_version "2", inputs
  x, offset, mask, weight[, bias], the five INT fields (stride, padding, dilation, group,
  deformable_group) all present; a ones mask is synthesized when the source has none.
* ``trtconv-plugin``: trtconv's own DCNv2 plugin, described by its spec
  (:func:`trtconv.rewrites.plugin_spec.plugin_spec`).

TensorRT needs symmetric pads: asymmetric ones become an explicit zero ``Pad`` of the
input plus the symmetric remainder, which samples exactly the same values (bilinear
sampling treats outside pixels as zeros).

A new target is one more :class:`DcnTarget` in :data:`TARGETS` (its emitter may live in a
module of its own); nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from trtconv.errors import UnsupportedModelError
from trtconv.rewrites.dcn_dialects import DcnNode, tensor_shape
from trtconv.rewrites.emitter import PENDING_DOMAIN, Emitter
from trtconv.rewrites.plugin_spec import TRT_MODULATED_DEFORM_CONV, PluginSpec
from trtconv.rewrites.reference import DcnParams

DEFORMCONV_OPSET = 19


@dataclass(frozen=True)
class DcnInputs:
    """The original node's tensors by role (mask and bias may be absent)."""

    x: gs.Tensor
    offset: gs.Tensor
    mask: gs.Tensor | None
    weight: gs.Tensor
    bias: gs.Tensor | None


# (emitter, the DCN, its input tensors, the output tensor, the plugin spec or None) -> nodes added to the emitter
Emit = Callable[[Emitter, DcnNode, DcnInputs, gs.Tensor, PluginSpec | None], None]


@dataclass(frozen=True)
class DcnTarget:
    name: str
    emit: Emit
    # > 0: standard ONNX ops (emitted in PENDING_DOMAIN), run by ONNX Runtime in the proof; the
    # model's default opset is raised to this. 0: a plugin node, run by onnx's reference evaluator.
    opset: int = 0
    spec: PluginSpec | None = None  # the plugin node's fixed spec
    needs_spec: bool = False  # the spec comes from RewriteSettings.dcn_plugin
    # asymmetric pads: "pad-node" (explicit Pad + symmetric pads), "spec" (as the plugin spec
    # says: a symmetric "padding" field or four "pads"), "taps" (built into the sampling; no note)
    pads: str = "pad-node"
    # imported by TensorRT through its ModulatedDeformConv2d, which may swap h and w
    trt_modulated_deform_conv: bool = False
    exact_proof_shapes: bool = False  # prove at the model's spatial size, never shrunk
    # computes the op another way (rounded differently): its node proof holds it to the float64
    # reference, and the graph proof (1e-6, for exact rewrites) is cut at its output
    cut_graph_proof: bool = False
    # a model-level step before the graph is imported (e.g. shapes the emitter bakes in); not for
    # models over the large-model threshold
    prepare: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None

    def plugin(self, configured: PluginSpec | None) -> PluginSpec | None:
        return configured if self.needs_spec else self.spec

    def pads_note(self, pads: tuple[int, int, int, int], spec: PluginSpec | None) -> str | None:
        if self.pads == "taps":
            return None
        if self.pads == "pad-node" or (spec is not None and spec.symmetric_pads):
            return f"asymmetric pads {list(pads)}: explicit zero Pad + symmetric pads"
        return f"asymmetric pads {list(pads)} passed to the plugin"


def symmetric_split(pads: tuple[int, int, int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """(symmetric part (h, w), extra explicit padding (top, left, bottom, right))."""
    t, left, b, r = pads
    sh, sw = min(t, b), min(left, r)
    return (sh, sw), (t - sh, left - sw, b - sh, r - sw)


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


def emit_deformconv(em: Emitter, dcn: DcnNode, io: DcnInputs, out: gs.Tensor, _spec: PluginSpec | None) -> None:
    """ONNX DeformConv (opset 19) with symmetric pads, after an explicit Pad where they were not."""
    (ph, pw), extra = symmetric_split(dcn.params.pads)
    attrs: dict[str, Any] = {
        "strides": list(dcn.params.stride),
        "pads": [ph, pw, ph, pw],
        "dilations": list(dcn.params.dilation),
        "group": dcn.params.group,
        "offset_group": dcn.params.deformable_group,
    }
    if dcn.kernel:
        attrs["kernel_shape"] = list(dcn.kernel)
    ins: list[gs.Tensor] = [_padded_input(em, io.x, extra), io.weight, io.offset]
    if io.bias is not None or io.mask is not None:
        ins.append(io.bias if io.bias is not None else gs.Variable.empty())
    if io.mask is not None:
        ins.append(io.mask)
    em.node("DeformConv", "deformconv", ins, [out], attrs, domain=PENDING_DOMAIN)


def emit_plugin(em: Emitter, dcn: DcnNode, io: DcnInputs, out: gs.Tensor, spec: PluginSpec | None) -> None:
    """One plugin node laid out as ``spec`` says (input order, fields, weight layout, required mask/bias)."""
    assert spec is not None
    name = em.base
    if spec.max_kernel_taps and dcn.kernel and dcn.kernel[0] * dcn.kernel[1] > spec.max_kernel_taps:
        raise UnsupportedModelError(
            f"node {name!r}: kernel {dcn.kernel[0]}x{dcn.kernel[1]} exceeds the {spec.name} plugin's limit of "
            f"{spec.max_kernel_taps} taps", hint="use --dcn-target deformconv or trt-plugin")
    # TensorRT's importer and its plugin take symmetric pads only; trtconv's plugin takes all four
    _, extra = symmetric_split(dcn.params.pads)
    xin = _padded_input(em, io.x, extra) if spec.symmetric_pads else io.x
    mask, bias, weight = io.mask, io.bias, io.weight
    if mask is None and spec.mask_required:
        if dcn.kernel is None:
            raise UnsupportedModelError(
                f"node {name!r}: kernel size unknown, cannot build the mask the plugin needs",
                hint="make the weight an initializer or give --shapes so shapes can be inferred",
            )
        k = dcn.kernel[0] * dcn.kernel[1] * dcn.params.deformable_group
        mask = _ones_mask(em, io.offset, k, io.x.dtype)
    if bias is None and spec.bias_required:
        cout = tensor_shape(weight)
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
    by_role: dict[str, gs.Tensor | None] = {"x": xin, "offset": io.offset, "mask": mask, "weight": weight,
                                            "bias": bias}
    plugin_inputs: list[gs.Tensor] = [by_role[r] or gs.Variable.empty() for r in spec.inputs]
    while plugin_inputs and plugin_inputs[-1].name == "":
        plugin_inputs.pop()
    pattrs: dict[str, Any] = {name: field_value(role, dcn.params) for name, role in spec.fields}
    for fname, value in spec.constants:
        pattrs[fname] = value
    pattrs["plugin_version"] = spec.version
    pattrs["plugin_namespace"] = spec.namespace
    em.node(spec.name, "plugin", plugin_inputs, [out], pattrs, domain=spec.domain)


DEFORMCONV = DcnTarget("deformconv", emit_deformconv, opset=DEFORMCONV_OPSET, trt_modulated_deform_conv=True)
TRT_PLUGIN = DcnTarget("trt-plugin", emit_plugin, spec=TRT_MODULATED_DEFORM_CONV, pads="spec",
                       trt_modulated_deform_conv=True)
TRTCONV_PLUGIN = DcnTarget("trtconv-plugin", emit_plugin, needs_spec=True, pads="spec")

TARGETS: dict[str, DcnTarget] = {t.name: t for t in (DEFORMCONV, TRT_PLUGIN, TRTCONV_PLUGIN)}
DEFAULT_TARGET = DEFORMCONV.name
