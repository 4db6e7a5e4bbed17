"""The registry of rewrite rules: ``check`` asks it whether a node is rewritable, ``rewrite``
asks it which rule rewrites a node. It holds rule objects (:class:`~.rule.RewriteRule`).

To add a rule: write it (a ``RewriteRule`` subclass in a module of its own) and append an
instance to :data:`RULES`. A new DCN dialect needs only an entry in ``dcn_dialects.DIALECTS``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from trtconv.onnxutil.domains import normalize_domain
from trtconv.rewrites.dcn import DcnRule
from trtconv.rewrites.dcn_dialects import DIALECTS
from trtconv.rewrites.pluginmap import PluginMap
from trtconv.rewrites.pluginmap_rule import PluginMapRule
from trtconv.rewrites.rule import RewriteRule, target_family
from trtconv.rewrites.transformer import TRANSFORMER_RULES

RULES: tuple[RewriteRule, ...] = tuple(DcnRule(d) for d in DIALECTS)
RULES += TRANSFORMER_RULES  # com.microsoft fused transformer ops -> standard ONNX

# (domain, op_type) -> the built-in rule for it; the empty domain is ONNX's default domain
REWRITABLE: dict[tuple[str, str], RewriteRule] = {key: rule for rule in RULES for key in rule.ops}


RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)


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


def active_rules(plugin_map: PluginMap | None, skip: Collection[str] = (),
                 target: str | None = None) -> tuple[RewriteRule, ...]:
    """The rules one rewrite applies, in precedence order: the user's plugin map, then the
    built-in ones the target needs (all for ``target`` None) less those named in ``skip``."""
    family = target_family(target) if target is not None else None
    built_in = tuple(r for r in RULES if r.name not in skip and (family is None or family in r.targets))
    return ((PluginMapRule(plugin_map),) if plugin_map is not None else ()) + built_in
