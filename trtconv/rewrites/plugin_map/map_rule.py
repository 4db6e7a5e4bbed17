"""The user's ``--plugin-map`` as a rewrite rule (the map's format: :mod:`.mapping`)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from trtconv.rewrites.plugin_map.mapping import PlannedPluginNode, PluginMap, emit_plugin_node, plan
from trtconv.rewrites.proof import Proof
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site


class PluginMapRule(RewriteRule):
    """The user's plugin map as a rule: every mapped op becomes its plugin node. It comes before
    the built-in rules, and is checked on every matching node before anything is built."""

    name = "plugin-map"
    description = "custom op -> TensorRT plugin node, as --plugin-map says"

    def __init__(self, pmap: PluginMap) -> None:
        self.pmap = pmap
        self.ops = tuple((op.domain, op.op_type) for op in pmap.ops)

    def _plan(self, node: gs.Node, ctx: RuleContext) -> PlannedPluginNode | None:
        op = self.pmap.lookup(node.domain or "", node.op)
        return None if op is None else plan(op, node, ctx.graph_outputs)

    def precheck(self, node: gs.Node, ctx: RuleContext) -> None:
        self._plan(node, ctx)

    def match(self, node: gs.Node, ctx: RuleContext) -> PlannedPluginNode | None:
        return self._plan(node, ctx)

    def emit(self, ctx: RuleContext, site: Site, match: PlannedPluginNode) -> Emitted:
        new = emit_plugin_node(ctx.graph, site.name, match, site.inputs, site.outputs)
        note = (f"attributes not mapped (dropped): {', '.join(match.dropped)}",) if match.dropped else ()
        return Emitted((new,), f"{match.op.plugin_name} v{match.op.plugin_version}", note)

    def proof_case(self, ctx: RuleContext, site: Site, match: PlannedPluginNode, emitted: Emitted) -> Proof:
        return self.unproven(match)

    def unproven(self, match: PlannedPluginNode) -> Proof:
        return Proof("none", True, reason=f"not numeric: {match.op.plugin_name} has no CPU implementation; "
                                          "structure and attribute types checked")
