"""The registry of rewrite rules, the one place rule families are listed: ``check`` asks it
whether a node is rewritable, ``rewrite`` asks it which rule rewrites a node and which family
checks which settings. It holds rule objects (:class:`~.rule.RewriteRule`) grouped in
:class:`~.rule.RuleFamily` objects.

To add a family: a subpackage of ``trtconv.rewrites`` (like ``dcn/``) whose front door exports
its ``FAMILY``, and one more entry in :data:`FAMILIES`. A new DCN dialect needs only an entry in
``dcn.dialects.DIALECTS``; a new DCN target one in ``dcn.targets.TARGETS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from trtconv.onnxutil import normalize_domain
from trtconv.rewrites import dcn, detection, dtypes, quantized
from trtconv.rewrites import rewrite_settings as core_settings
from trtconv.rewrites.plugin_map import PluginMap, PluginMapRule
from trtconv.rewrites.rewrite_settings import RewriteSettings
from trtconv.rewrites.rule import RewriteRule, RuleFamily

FAMILIES: tuple[RuleFamily, ...] = (
    dcn.FAMILY,
    quantized.FAMILY,
    dtypes.FAMILY,
    detection.FAMILY,
)

RULES: tuple[RewriteRule, ...] = tuple(rule for family in FAMILIES for rule in family.rules)

# (domain, op_type) -> the built-in rule for it; the empty domain is ONNX's default domain
REWRITABLE: dict[tuple[str, str], RewriteRule] = {key: rule for rule in RULES if rule.claims_ops for key in rule.ops}


def check_settings(settings: RewriteSettings) -> None:
    """UsageError for settings no rewrite can run with: each family's, then the framework's."""
    for family in FAMILIES:
        family.check_settings(settings)
    core_settings.check_settings(settings)


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
