"""The ``deformconv`` DCN target: standard ONNX ``DeformConv`` (opset 19). TensorRT >= 10.1 imports
it through its ModulatedDeformConv2d plugin; ONNX Runtime >= 1.31 runs it (the proof)."""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from trtconv.rewrites.dcn.dialects import DcnNode
from trtconv.rewrites.dcn.lowering import DcnInputs, DcnTarget, padded_input, symmetric_split
from trtconv.rewrites.dcn.plugin_spec import PluginSpec
from trtconv.rewrites.emitter import PENDING_DOMAIN, Emitter

DEFORMCONV_OPSET = 19


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
    ins: list[gs.Tensor] = [padded_input(em, io.x, extra), io.weight, io.offset]
    if io.bias is not None or io.mask is not None:
        ins.append(io.bias if io.bias is not None else gs.Variable.empty())
    if io.mask is not None:
        ins.append(io.mask)
    em.node("DeformConv", "deformconv", ins, [out], attrs, domain=PENDING_DOMAIN)


DEFORMCONV = DcnTarget("deformconv", emit_deformconv, opset=DEFORMCONV_OPSET, opset_op="DeformConv",
                        trt_modulated_deform_conv=True)
