"""The plugin-node DCN targets.

* ``trt-plugin``: a ``ModulatedDeformConv2d`` plugin node, plugin_version "2", inputs
  x, offset, mask, weight[, bias], the five INT fields (stride, padding, dilation, group,
  deformable_group) all present; a ones mask is synthesized when the source has none.
* ``trtconv-plugin``: trtconv's own DCNv2 plugin, described by its spec
  (:func:`trtconv.rewrites.dcn.plugin_spec.trtconv_plugin_spec`).

Both are proven in onnx's reference evaluator running the spec's contract (:mod:`.dcn`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.errors import UnsupportedModelError
from trtconv.rewrites.dcn.deform_math import DcnParams
from trtconv.rewrites.dcn.dialects import DcnNode, tensor_shape
from trtconv.rewrites.dcn.lowering import DcnInputs, DcnTarget, padded_input, symmetric_split
from trtconv.rewrites.dcn.plugin_spec import TRT_MODULATED_DEFORM_CONV, PluginSpec
from trtconv.rewrites.emitter import Emitter


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
    xin = padded_input(em, io.x, extra) if spec.symmetric_pads else io.x
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


TRT_PLUGIN = DcnTarget("trt-plugin", emit_plugin, spec=TRT_MODULATED_DEFORM_CONV, pads="spec",
                       trt_modulated_deform_conv=True)
TRTCONV_PLUGIN = DcnTarget("trtconv-plugin", emit_plugin, needs_spec=True, pads="spec")
