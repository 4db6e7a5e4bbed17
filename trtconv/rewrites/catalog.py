"""Which custom ops trtconv knows how to rewrite: shared by ``check`` (to say so) and ``rewrite`` (to do it).

Keyed by (domain, op_type) with the empty domain spelled "" (ONNX's default domain).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RewriteRule:
    name: str  # stable rule id, used in reports and JSON
    description: str


DCNV2_CENTERNET = RewriteRule("dcnv2-centernet", "CenterNet DCNv2 -> DeformConv (or a DCNv2 plugin node)")
DCNV2_MMCV = RewriteRule("dcnv2-mmcv", "mmcv MMCVModulatedDeformConv2d -> DeformConv (or a DCNv2 plugin node)")
RENAME_SHARED_DIMS = RewriteRule("rename-shared-dims", "input dims sharing one dim_param name -> one name per dim "
                                 "(TensorRT treats equally named dims as equal)")
DEFORMCONV = RewriteRule("deformconv", "ONNX DeformConv with asymmetric pads -> Pad + DeformConv (or a DCNv2 plugin node)")

REWRITABLE: dict[tuple[str, str], RewriteRule] = {
    ("", "DCNv2"): DCNV2_CENTERNET,
    ("mmcv", "MMCVModulatedDeformConv2d"): DCNV2_MMCV,
    ("", "MMCVModulatedDeformConv2d"): DCNV2_MMCV,
    ("mmdeploy", "MMCVModulatedDeformConv2d"): DCNV2_MMCV,  # mmdeploy's export of the same op
    ("", "DeformConv"): DEFORMCONV,
}


def rewrite_rule_for(domain: str, op_type: str) -> RewriteRule | None:
    """The rule that can rewrite this op, if any. ``ai.onnx`` and "" are the same domain."""
    key = ("" if domain in ("", "ai.onnx") else domain, op_type)
    return REWRITABLE.get(key)
