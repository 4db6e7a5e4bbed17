"""What ``rewrite`` does: one frozen settings object, checked before any work starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trtconv.errors import UsageError
from trtconv.load import LAZY_WEIGHTS_BYTES, PROTOBUF_LIMIT, Shape

if TYPE_CHECKING:  # the families' own types; the families import this module, so not at run time
    from trtconv.rewrites.dcn import PluginSpec
    from trtconv.rewrites.plugin_map import PluginMap

DEFAULT_FOLD_LIMIT = 16 << 20  # bytes: larger folded tensors stay as nodes
NODE_RTOL = 1e-5  # node proofs: max |err| <= NODE_RTOL * max(1, max |ref|)
GRAPH_RTOL = 1e-6


@dataclass(frozen=True)
class RewriteSettings:
    """What ``rewrite`` does. Frozen: the same settings and model always give the same bytes."""

    dcn_target: str = "deformconv"  # a name in rewrites.dcn's TARGETS (checked by that family)
    dcn_plugin: PluginSpec | None = None  # for targets that need a spec ("trtconv-plugin": trtconv_plugin_spec(path))
    plugin_map: PluginMap | None = None
    skip_rules: frozenset[str] = frozenset()  # built-in rule names not to apply (--skip-rule)
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    # Shapes for random proof inputs only, never applied to the model (build: the profile's opt
    # corner): the drift of a rule that changes numbers is measured even on a dynamic model.
    proof_shapes: Mapping[str, Shape] = field(default_factory=dict)
    # the --trt target the model is rewritten for ("rtx", "10.16", ...; None: not known): rules made
    # for some targets only (RewriteRule.targets: RoiAlign without a plugin for RTX) apply there
    target: str | None = None
    # build: a model no rule may apply to goes on untouched (no clean-up, no round trip, nothing to
    # prove); rewrite (False): the clean-ups below run whether or not a rule applies
    rules_only: bool = False
    fold_constants: bool = True
    fold_size_limit: int = DEFAULT_FOLD_LIMIT
    remove_dead_nodes: bool = True
    int64_to_int32: bool = True
    prune_opsets: bool = True
    verify: bool = True
    # A rule whose proof fails (or cannot run) is dropped for that node, which stays as it was, and a
    # clean-up the graph proof fails is dropped for the graph; the report lists them (stepped_aside).
    # False (``trtconv rewrite``): a failed proof is an error. ``build`` sets it: the parser decides.
    step_aside: bool = False
    seed: int = 0
    # proofs pass when max |err| <= tolerance * max(1, max |reference|)
    node_tolerance: float = NODE_RTOL
    graph_tolerance: float = GRAPH_RTOL
    # Models above this many bytes of weights take the large-model path: no protobuf
    # serialization in memory (no folding, no graph proof), external data on save.
    large_model_bytes: int = PROTOBUF_LIMIT
    # Models with at least this many bytes of external data keep it on disk (``load_model``'s
    # ``lazy_from``): tensors are read where a rule needs them and streamed into the output.
    lazy_weights_bytes: int = LAZY_WEIGHTS_BYTES

    def to_json(self) -> dict[str, Any]:
        return {
            "dcn_target": self.dcn_target,
            "dcn_plugin": None if self.dcn_plugin is None else
            f"{self.dcn_plugin.namespace}::{self.dcn_plugin.name} v{self.dcn_plugin.version}",
            "plugin_map": None if self.plugin_map is None else self.plugin_map.source,
            "skip_rules": sorted(self.skip_rules),
            "shapes": {k: list(v) for k, v in sorted(self.shapes.items())},
            "proof_shapes": {k: list(v) for k, v in sorted(self.proof_shapes.items())},
            "target": self.target,
            "rules_only": self.rules_only,
            "fold_constants": self.fold_constants,
            "fold_size_limit": self.fold_size_limit,
            "remove_dead_nodes": self.remove_dead_nodes,
            "int64_to_int32": self.int64_to_int32,
            "prune_opsets": self.prune_opsets,
            "verify": self.verify,
            "step_aside": self.step_aside,
            "seed": self.seed,
            "node_tolerance": self.node_tolerance,
            "graph_tolerance": self.graph_tolerance,
        }


def check_settings(settings: RewriteSettings) -> None:
    """The framework's own settings; each rule family checks its own (``catalog.check_settings``)."""
    if not (settings.node_tolerance >= 0 and settings.graph_tolerance >= 0):
        raise UsageError("proof tolerances must be >= 0")
    if settings.fold_size_limit < 0:
        raise UsageError("the constant-folding size limit must be >= 0")
