"""Stage 3, rewrite: turn what TensorRT cannot parse into what it can, each rewrite proven numerically.

Public API (what ``build`` calls)::

    from trtconv.rewrites import RewriteSettings, rewrite
    result = rewrite(loaded_model, RewriteSettings(dcn_target="deformconv"))
    result.model              # onnx.ModelProto, save with trtconv.load.save_model
    result.report.to_json()   # schema "trtconv.rewrite/1", for the engine manifest
"""

from trtconv.rewrites.dcn import TARGETS as DCN_TARGETS
from trtconv.rewrites.dcn import PluginSpec, default_plugin_spec_path, load_plugin_spec, trtconv_plugin_spec
from trtconv.rewrites.pipeline import (
    SCHEMA,
    RewriteEntry,
    RewriteReport,
    RewriteResult,
    RewriteSettings,
    rewrite,
)
from trtconv.rewrites.pluginmap import PluginMap, load_plugin_map, parse_plugin_map

__all__ = [
    "DCN_TARGETS",
    "SCHEMA",
    "PluginMap",
    "PluginSpec",
    "RewriteEntry",
    "RewriteReport",
    "RewriteResult",
    "RewriteSettings",
    "default_plugin_spec_path",
    "load_plugin_map",
    "load_plugin_spec",
    "parse_plugin_map",
    "rewrite",
    "trtconv_plugin_spec",
]
