"""Stage 3, rewrite: turn what TensorRT cannot parse into what it can, each rewrite proven numerically.

Public API (what ``build`` calls)::

    from trtconv.rewrites import RewriteSettings, rewrite
    result = rewrite(loaded_model, RewriteSettings(dcn_target="deformconv"))
    result.model              # onnx.ModelProto, save with trtconv.load.save_model
    result.report.to_json()   # schema "trtconv.rewrite/1", for the engine manifest

Where things are: the rule interface (rule.py), the registry (catalog.py), the driver
(pipeline.py), the DCN rule (dcn.py: dialects in dcn_dialects.py, targets registered in
dcn_targets.py: dcn_deformconv.py, dcn_plugins.py, dcn_portable.py),
proofs (proof.py), clean-ups (cleanup.py), plugin maps (pluginmap.py, pluginmap_rule.py).
"""

from trtconv.rewrites.dcn_targets import TARGETS
from trtconv.rewrites.pipeline import rewrite
from trtconv.rewrites.plugin_spec import (
    PluginSpec,
    builtin_plugin_spec,
    load_plugin_spec,
    trtconv_plugin_spec,
)
from trtconv.rewrites.pluginmap import PluginMap, load_plugin_map, parse_plugin_map
from trtconv.rewrites.report import SCHEMA, RewriteEntry, RewriteReport, RewriteResult
from trtconv.rewrites.settings import RewriteSettings

DCN_TARGETS = tuple(TARGETS)

__all__ = [
    "DCN_TARGETS",
    "SCHEMA",
    "PluginMap",
    "PluginSpec",
    "RewriteEntry",
    "RewriteReport",
    "RewriteResult",
    "RewriteSettings",
    "builtin_plugin_spec",
    "load_plugin_map",
    "load_plugin_spec",
    "parse_plugin_map",
    "trtconv_plugin_spec",
    "rewrite",
]
