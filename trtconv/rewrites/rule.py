"""What a rewrite rule is: an object that matches a node, emits its replacement and says how
to prove it. The driver (:mod:`trtconv.rewrites.driver`) knows nothing more about any rule.

A rule's life for one node, in order:

0. ``prepare(model, settings, large)`` once, before the graph is imported (default: nothing);
1. ``precheck(node, ctx)`` for every node the rule covers, before anything is built (a bad
   plugin map fails whole, never half-applied);
2. ``match(node, ctx)``: what it read from the node, or None to leave the node as it is;
3. ``emit(ctx, site, match)``: the replacement nodes writing the site's outputs (the original
   node is already disconnected), as an :class:`Emitted`;
4. ``proof_case(ctx, site, match, emitted)`` when proofs are on (``unproven(match)`` when
   off): a :class:`NodeProofCase` (the replacement, its inputs, and what the rule's reference
   implementation of the original op computes on them) for the driver to run, or a finished
   :class:`Proof`.

New rules are registered in :mod:`trtconv.rewrites.catalog`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.rewrite_settings import RewriteSettings


@dataclass(frozen=True)
class RuleContext:
    """What a rule may read about the model being rewritten."""

    graph: gs.Graph
    tensors: Mapping[str, gs.Tensor]  # by name, as imported (replacements add theirs to the graph only)
    shapes: Mapping[str, list[Any]]  # inferred value shapes (after constant folding)
    settings: RewriteSettings
    opset: int  # the model's default-domain opset before the rewrite
    graph_outputs: frozenset[str]


@dataclass(frozen=True)
class Site:
    """One node being replaced: its unique name (replacements are named ``<name>/...``), its
    position (proof seeds derive from it), its op for messages, and its former tensors."""

    name: str
    index: int
    op: str
    inputs: tuple[gs.Tensor, ...]
    outputs: tuple[gs.Tensor, ...]


@dataclass(frozen=True)
class Emitted:
    nodes: tuple[gs.Node, ...]
    target: str  # what the node became, for the report
    notes: tuple[str, ...] = ()
    pending_opset: int = 0  # default-domain opset the nodes emitted in PENDING_DOMAIN need (0: none)
    pending_op: str = ""  # the op that needs it, for messages ("DeformConv")
    graph_cuts: frozenset[str] = frozenset()  # tensors the whole-graph proof must not compare
    # Other nodes the replacement stands for (a quantized op's Cast/Mul tail): the rule detaches
    # them (:func:`detach`) before emitting, the driver drops them and never visits them.
    absorbed: tuple[gs.Node, ...] = ()
    # False: the replacement changes the numbers on purpose (dynamic quantization dropped); its
    # node proof holds a measured bound, and the report adds the whole model's measured drift.
    exact: bool = True


def detach(nodes: Sequence[gs.Node]) -> None:
    """Disconnect nodes a replacement absorbs, before the replacement writes their outputs."""
    for n in nodes:
        n.inputs.clear()
        n.outputs.clear()


class RewriteRule(ABC):
    """One kind of node trtconv rewrites."""

    name: str  # stable rule id, used in reports and JSON
    description: str
    ops: tuple[tuple[str, str], ...]  # (domain, op_type) it covers; "" is ONNX's default domain
    # ``check`` calls every erroring node of ``ops`` rewritable by this rule; False for a rule that
    # matches a common op only in one context (a Cast after a uint8 input): it claims nodes by ``settles``
    claims_ops: bool = True
    # the ``--trt`` targets that need the rule (RewriteSettings.target); empty: every target. A rule
    # for some targets only is applied when the settings name one of them (``build --trt rtx``).
    targets: tuple[str, ...] = ()

    def prepare(self, model: onnx.ModelProto, settings: RewriteSettings, large: bool) -> onnx.ModelProto:
        """A model-level step before the graph is imported (default: none); ``large``: over the
        large-model threshold, where nothing may serialize the model."""
        return model

    def precheck(self, node: gs.Node, ctx: RuleContext) -> None:
        """Raise before any node is built if this node cannot be rewritten (default: nothing to check)."""
        return None

    @abstractmethod
    def match(self, node: gs.Node, ctx: RuleContext) -> Any | None:
        """What the rule read from ``node``, or None to leave it as it is."""

    @abstractmethod
    def emit(self, ctx: RuleContext, site: Site, match: Any) -> Emitted:
        """The replacement, writing ``site.outputs``."""

    @abstractmethod
    def proof_case(self, ctx: RuleContext, site: Site, match: Any, emitted: Emitted) -> NodeProofCase | Proof:
        """How to prove the replacement computes what the original did (or why it cannot be run)."""

    def settles(self, node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                producer: Mapping[str, onnx.NodeProto]) -> bool:
        """Whether applying this rule also clears ``check``'s errors ((finding rule, message) pairs) on
        ``node``, an op the rule does not cover (a uint8 tensor a Flatten only passes along, say);
        ``producer``: tensor name -> the node writing it. Default: no."""
        return False

    def unproven(self, match: Any) -> Proof:
        """The proof entry when proofs are off (``--no-verify``)."""
        return Proof("none", True, reason="--no-verify")


def _no_settings_of_its_own(settings: RewriteSettings) -> None:
    return None


@dataclass(frozen=True)
class RuleFamily:
    """A family of built-in rules shipped as one subpackage (``rewrites/dcn/``): its rules, in
    precedence order, and the check of the settings only it reads. The catalog lists the families."""

    name: str
    rules: tuple[RewriteRule, ...]
    check_settings: Callable[[RewriteSettings], None] = _no_settings_of_its_own
