"""The registry of rewrite rules, the one place rule families are listed: ``check`` asks it
whether a node is rewritable, ``rewrite`` asks it which rule rewrites a node and which family
checks which settings. It holds rule objects (:class:`~.rule.RewriteRule`) grouped in
:class:`~.rule.RuleFamily` objects.

To add a family: a subpackage of ``trtconv.rewrites`` (like ``dcn/``) whose front door exports
its ``FAMILY``, and one more entry in :data:`FAMILIES`. A new DCN dialect needs only an entry in
``dcn.dialects.DIALECTS``; a new DCN target one in ``dcn.targets.TARGETS``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import onnx

from trtconv.errors import UsageError
from trtconv.onnxutil import normalize_domain
from trtconv.rewrites import dcn, detection, dtypes, quantized, spectral, transformer
from trtconv.rewrites import rewrite_settings as core_settings
from trtconv.rewrites.plugin_map import PluginMap, PluginMapRule
from trtconv.rewrites.rewrite_settings import RewriteSettings
from trtconv.rewrites.rule import RewriteRule, RuleFamily

FAMILIES: tuple[RuleFamily, ...] = (
    dcn.FAMILY,
    quantized.FAMILY,
    dtypes.FAMILY,
    detection.FAMILY,
    spectral.FAMILY,  # DFT -> MatMul where the target has no DFT
    transformer.FAMILY,  # ONNX Runtime's fused transformer ops (com.microsoft) -> standard ONNX
)

RULES: tuple[RewriteRule, ...] = tuple(rule for family in FAMILIES for rule in family.rules)

# (domain, op_type) -> the built-in rule for it; the empty domain is ONNX's default domain
REWRITABLE: dict[tuple[str, str], RewriteRule] = {key: rule for rule in RULES if rule.claims_ops for key in rule.ops}


RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)


def check_settings(settings: RewriteSettings) -> None:
    """UsageError for settings no rewrite can run with: each family's, then the framework's."""
    for family in FAMILIES:
        family.check_settings(settings)
    core_settings.check_settings(settings)
    unknown = sorted(set(settings.skip_rules) - set(RULE_NAMES))
    if unknown:
        raise UsageError(f"unknown rewrite rule {unknown[0]!r} to skip", hint=f"rules: {', '.join(RULE_NAMES)}")


def rule_among(rules: Sequence[RewriteRule], domain: str | None, op_type: str,
               opset: int | None = None) -> RewriteRule | None:
    """The first of ``rules`` that covers this op (``ai.onnx`` and "" are the same domain), at
    ``opset`` when given (a rule states the opsets it rewrites)."""
    key = (normalize_domain(domain), op_type)
    return next((r for r in rules if key in r.ops and (opset is None or r.covers_opset(opset))), None)


def rewrite_rule_for(domain: str | None, op_type: str, opset: int | None = None) -> RewriteRule | None:
    """The built-in rule that can rewrite this op (at ``opset`` when given), if any."""
    rule = REWRITABLE.get((normalize_domain(domain), op_type))
    return rule if rule is not None and (opset is None or rule.covers_opset(opset)) else None


def rule_settling(node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                  producer: Mapping[str, onnx.NodeProto]) -> RewriteRule | None:
    """The built-in rule whose rewrite also clears these ``check`` errors of ``node`` (an op no rule
    covers: a uint8 tensor passing through a Flatten, ...), if any."""
    return next((r for r in RULES if errors and r.settles(node, errors, producer)), None)


def active_rules(plugin_map: PluginMap | None, skip: Collection[str] = ()) -> tuple[RewriteRule, ...]:
    """The rules one rewrite applies, in precedence order: the user's plugin map, then the
    built-in ones less those named in ``skip`` (``--skip-rule``)."""
    built_in = tuple(r for r in RULES if r.name not in skip)
    return ((PluginMapRule(plugin_map),) if plugin_map is not None else ()) + built_in
