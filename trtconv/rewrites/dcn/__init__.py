"""The DCN rule family: deformable convolutions (CenterNet DCNv2, mmcv, ONNX DeformConv) become
a target ``--dcn-target`` chooses (DeformConv, a DCNv2 plugin node, or the portable form of
standard ops), each proven against a float64 reference of the original op.

Where things are: the rule (deform_rule.py), the dialects it reads (dialects.py), what a target
is (lowering.py) and the registry of targets (targets.py: deformconv.py, plugins.py,
portable.py), the plugin's spec (plugin_spec.py, dcnv2_spec.json), the float64 reference
(deform_math.py).
"""

from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d
from trtconv.rewrites.dcn.deform_rule import DcnRule
from trtconv.rewrites.dcn.dialects import DIALECTS
from trtconv.rewrites.dcn.plugin_spec import (
    TRT_MODULATED_DEFORM_CONV,
    PluginSpec,
    builtin_plugin_spec,
    builtin_spec_document,
    load_plugin_spec,
    trtconv_plugin_spec,
)
from trtconv.rewrites.dcn.targets import DEFAULT_TARGET, TARGETS, check_settings
from trtconv.rewrites.rule import RuleFamily

FAMILY = RuleFamily("dcn", tuple(DcnRule(d) for d in DIALECTS), check_settings)

__all__ = [
    "DEFAULT_TARGET",
    "DIALECTS",
    "FAMILY",
    "TARGETS",
    "TRT_MODULATED_DEFORM_CONV",
    "DcnParams",
    "DcnRule",
    "PluginSpec",
    "builtin_plugin_spec",
    "builtin_spec_document",
    "load_plugin_spec",
    "modulated_deform_conv2d",
    "trtconv_plugin_spec",
]
