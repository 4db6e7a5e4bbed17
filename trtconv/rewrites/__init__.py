"""Stage 3, rewrite: turn what TensorRT cannot parse into what it can, each rewrite proven numerically.

Public API (what ``build`` calls)::

    from trtconv.rewrites import RewriteSettings, rewrite
    result = rewrite(loaded_model, RewriteSettings(dcn_target="deformconv"))
    result.model              # onnx.ModelProto, save with trtconv.load.save_model
    result.report.to_json()   # schema "trtconv.rewrite/1", for the engine manifest

Where things are. The rule framework, which knows no rule family: the rule interface and
``RuleFamily`` (rule.py), the registry of families (catalog.py: the one place a family is
listed), the driver (driver.py), proofs (proof.py; the graph proof's plan, where the change can
reach, in change_scope.py, and its run in scoped_proof.py), the report (rewrite_report.py), settings
(settings.py), node emission (emitter.py), clean-ups (cleanup.py), the large-model round trip
(roundtrip.py), JSON/YAML reading (documents.py); and, apart from the rules, the cut of
``build --split-tail`` (tail_cut.py: the engine's head and ONNX Runtime's tail). The rule families, one subpackage each:
``dcn/`` (deformable convolutions), ``transformer/`` (ONNX Runtime's fused transformer ops)
and ``plugin_map/`` (the user's ``--plugin-map``).
"""

from trtconv.rewrites.catalog import (
    RULE_NAMES,
    rewrite_rule_for,
    rule_settling,
)
from trtconv.rewrites.cleanup import (
    RENAME_SHARED_DIMS,
)
from trtconv.rewrites.dcn import (
    TARGETS,
    PluginSpec,
    builtin_plugin_spec,
    builtin_spec_document,
    load_plugin_spec,
    trtconv_plugin_spec,
)
from trtconv.rewrites.driver import rewrite
from trtconv.rewrites.plugin_map import PluginMap, load_plugin_map, parse_plugin_map
from trtconv.rewrites.rewrite_report import SCHEMA, RewriteEntry, RewriteReport, RewriteResult, SteppedAside
from trtconv.rewrites.rewrite_settings import (
    DEFAULT_FOLD_LIMIT,
    NODE_RTOL,
    RewriteSettings,
)
from trtconv.rewrites.rule import NodeView, RewriteRule
from trtconv.rewrites.tail_cut import (
    SPLIT_FLAG,
    TAIL_SUFFIX,
    CutProof,
    CutTensor,
    TailCut,
    cut_tail,
    prove_cut,
    tail_feeds,
    tail_ops,
)

DCN_TARGETS = tuple(TARGETS)

__all__ = [
    "DCN_TARGETS",
    "DEFAULT_FOLD_LIMIT",
    "NODE_RTOL",
    "RENAME_SHARED_DIMS",
    "RULE_NAMES",
    "SCHEMA",
    "SPLIT_FLAG",
    "TAIL_SUFFIX",
    "CutProof",
    "CutTensor",
    "TailCut",
    "NodeView",
    "PluginMap",
    "PluginSpec",
    "RewriteEntry",
    "RewriteReport",
    "RewriteResult",
    "RewriteRule",
    "RewriteSettings",
    "SteppedAside",
    "builtin_plugin_spec",
    "cut_tail",
    "builtin_spec_document",
    "load_plugin_map",
    "load_plugin_spec",
    "parse_plugin_map",
    "prove_cut",
    "rewrite",
    "rule_settling",
    "rewrite_rule_for",
    "tail_feeds",
    "tail_ops",
    "trtconv_plugin_spec",
]
