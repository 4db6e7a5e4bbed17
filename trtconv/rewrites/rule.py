"""What a rewrite rule is: an object that matches a node, emits its replacement and says how
to prove it. The driver (:mod:`trtconv.rewrites.driver`) knows nothing more about any rule.

A rule's life for one node, in order:

0. ``may_apply(node_proto, facts)``, a cheap look before anything is imported (a model none of whose
   nodes any rule may apply to is not imported at all by ``build``), then
   ``prepare(model, settings, large)`` once, before the graph is imported (default: nothing);
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
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.rewrite_settings import RewriteSettings


@dataclass(frozen=True)
class ModelFacts:
    """What :meth:`RewriteRule.may_apply` may read about the main graph, gathered in one pass over the
    proto before anything is imported: the element type of each graph input, and the data type of each
    constant (initializer or Constant node output)."""

    input_types: Mapping[str, int]
    constant_types: Mapping[str, int]

    @staticmethod
    def of(graph: onnx.GraphProto) -> ModelFacts:
        consts = {t.name: t.data_type for t in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].HasField("t"):
                consts[n.output[0]] = n.attribute[0].t.data_type
        return ModelFacts({i.name: i.type.tensor_type.elem_type for i in graph.input if i.name not in consts},
                          consts)


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
    # True: the replacement computes the op by another order of sums (a DFT as a matrix product instead of
    # ONNX Runtime's FFT), so the whole-graph proof allows float32 rounding over such sums (NODE_RTOL), not
    # only the rounding of a clean-up (GRAPH_RTOL)
    reorders_sums: bool = False


def detach(nodes: Sequence[gs.Node]) -> None:
    """Disconnect nodes a replacement absorbs, before the replacement writes their outputs."""
    for n in nodes:
        n.inputs.clear()
        n.outputs.clear()


MAX_OPSET = 10_000  # "no upper bound" for a rule's opset range


@dataclass(frozen=True)
class NodeView:
    """What a rule may read to refuse a node, the same whether ``check`` (an onnx node) or
    ``rewrite`` (a graphsurgeon node) asks: op, attributes, input/output names ("" = absent)."""

    op: str
    domain: str
    attrs: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int  # the model's default-domain opset
    shapes: Mapping[str, Sequence[Any]] = field(default_factory=dict)  # known value shapes
    partial: bool = False  # shapes may be missing where rewrite would know them (``check``): refuse only what is known

    def rank(self, i: int) -> int | None:
        """Rank of input ``i`` when known."""
        shape = self.shapes.get(self.inputs[i]) if self.has_input(i) else None
        return len(shape) if shape is not None else None

    @staticmethod
    def of_proto(node: onnx.NodeProto, opset: int) -> NodeView:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in attrs.items()}
        return NodeView(node.op_type, node.domain, attrs, tuple(node.input), tuple(node.output), opset)

    @staticmethod
    def of_gs(node: gs.Node, opset: int, graph_outputs: frozenset[str] = frozenset(),
              shapes: Mapping[str, Sequence[Any]] | None = None) -> NodeView:
        """An output nothing reads (no consumer, not a graph output) counts as absent."""
        outs = tuple(t.name if (t.outputs or t.name in graph_outputs) else "" for t in node.outputs)
        known = dict(shapes or {})
        for t in node.inputs:  # constants' shapes are known even where inference had none
            if isinstance(t, gs.Constant) or (t.name not in known and t.shape is not None):
                known[t.name] = list(t.shape)
        return NodeView(node.op, node.domain or "", dict(node.attrs), tuple(t.name for t in node.inputs), outs,
                        opset, known)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    def has_output(self, i: int) -> bool:
        return i < len(self.outputs) and bool(self.outputs[i])


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
    opsets: tuple[int, int] = (1, MAX_OPSET)  # the model's default-domain opsets it rewrites (inclusive)

    def refusal(self, node: NodeView) -> str | None:
        """Why this node cannot be rewritten (an attribute combination the rule does not
        support), or None. ``check`` reports it; ``rewrite`` leaves the node and says why."""
        return None

    def prepare(self, model: onnx.ModelProto, settings: RewriteSettings, large: bool) -> onnx.ModelProto:
        """A model-level step before the graph is imported (default: none); ``large``: over the
        large-model threshold, where nothing may serialize the model."""
        return model

    def may_apply(self, node: onnx.NodeProto, facts: ModelFacts) -> bool:
        """Whether ``node`` (one of ``ops``) could be a site of this rule, judged on the proto before
        any import; False only where it surely is not. Where no node of a model may be a site, a
        build hands the model on untouched (no graph round trip, nothing to prove). Default: yes;
        a rule claiming a common op (Cast, Gather) only in one context says where it cannot be."""
        return True

    def precheck(self, node: gs.Node, ctx: RuleContext) -> None:
        """Raise before any node is built if this node cannot be rewritten (default: nothing to check)."""
        return None

    def covers_opset(self, opset: int) -> bool:
        return self.opsets[0] <= opset <= self.opsets[1]

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
