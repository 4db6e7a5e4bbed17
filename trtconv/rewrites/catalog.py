"""The registry of rewrite rules: ``check`` asks it whether a node is rewritable, ``rewrite``
asks it which rule rewrites a node. It holds rule objects (:class:`~.rule.RewriteRule`).

To add a rule: write it (a ``RewriteRule`` subclass in a module of its own) and append an
instance to :data:`RULES`. A new DCN dialect needs only an entry in ``dcn_dialects.DIALECTS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from trtconv.onnxutil.domains import normalize_domain
from trtconv.rewrites.dcn import DcnRule
from trtconv.rewrites.dcn_dialects import DIALECTS
from trtconv.rewrites.detection.roi_align import RoiAlignRule
from trtconv.rewrites.dtypes.uint8_input import Uint8InputRule
from trtconv.rewrites.pluginmap import PluginMap
from trtconv.rewrites.pluginmap_rule import PluginMapRule
from trtconv.rewrites.quantized.dynamic_integer import DynamicIntegerRule
from trtconv.rewrites.quantized.dynamic_lstm import DynamicLstmRule
from trtconv.rewrites.quantized.dynamic_matmul import DynamicMatMulRule
from trtconv.rewrites.quantized.qdq import QdqRule
from trtconv.rewrites.quantized.qoperator import QOperatorRule
from trtconv.rewrites.rule import RewriteRule

RULES: tuple[RewriteRule, ...] = tuple(DcnRule(d) for d in DIALECTS)
RULES += (DynamicIntegerRule(),)
RULES += (DynamicLstmRule(),)
RULES += (DynamicMatMulRule(),)
RULES += (QdqRule(),)
RULES += (QOperatorRule(),)
RULES += (Uint8InputRule(),)
RULES += (RoiAlignRule(),)

# (domain, op_type) -> the built-in rule for it; the empty domain is ONNX's default domain
REWRITABLE: dict[tuple[str, str], RewriteRule] = {key: rule for rule in RULES if rule.claims_ops for key in rule.ops}


def rule_among(rules: Sequence[RewriteRule], domain: str | None, op_type: str) -> RewriteRule | None:
    """The first of ``rules`` that covers this op (``ai.onnx`` and "" are the same domain)."""
    key = (normalize_domain(domain), op_type)
    return next((r for r in rules if key in r.ops), None)


def rewrite_rule_for(domain: str | None, op_type: str) -> RewriteRule | None:
    """The built-in rule that can rewrite this op, if any."""
    return REWRITABLE.get((normalize_domain(domain), op_type))


def rule_settling(node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                  producer: Mapping[str, onnx.NodeProto]) -> RewriteRule | None:
    """The built-in rule whose rewrite also clears these ``check`` errors of ``node`` (an op no rule
    covers: a uint8 tensor passing through a Flatten, ...), if any."""
    return next((r for r in RULES if errors and r.settles(node, errors, producer)), None)


def active_rules(plugin_map: PluginMap | None) -> tuple[RewriteRule, ...]:
    """The rules one rewrite applies, in precedence order: the user's plugin map, then the built-in ones."""
    return ((PluginMapRule(plugin_map),) if plugin_map is not None else ()) + RULES
