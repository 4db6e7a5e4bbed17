"""A uint8 graph input that reaches its ``Cast`` to float through layout ops -> the ``Cast`` at the
input, the layout ops in float.

TensorRT-RTX 1.7 refuses a uint8 tensor into anything but a ``Cast`` (measured: "first input has type
UInt8 but must have type Float, Half, ..." for ``Transpose`` and ``Reshape``; tests/rewrites/
test_dtypes.py) and takes a uint8 input cast at once. An image model exported as
``uint8 NHWC -> Transpose -> Cast(float)`` is therefore moved around: ``Cast`` first (to the same
type), then the same layout ops. Layout ops only move values and every uint8 value is exact in
float16/32, so the outputs are equal (proven in ONNX Runtime). The engine's input stays uint8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Original, Proof
from trtconv.rewrites.quantized.graphs import producer, sole_consumer
from trtconv.rewrites.rule import Emitted, ModelFacts, RewriteRule, RuleContext, Site, detach

LAYOUT = ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Expand", "Tile",
          "DepthToSpace", "SpaceToDepth")
FLOAT_TARGETS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
PROOF_FILL = 8  # unknown dims of the input in the proof


@dataclass(frozen=True)
class Uint8Match:
    source: gs.Variable  # the uint8 graph input
    chain: tuple[gs.Node, ...]  # the layout ops, input first
    chain_inputs: tuple[tuple[gs.Tensor, ...], ...]  # each one's other inputs (shapes, axes)
    chain_attrs: tuple[dict[str, object], ...]
    to: int  # the Cast's target type
    original: Original


class Uint8InputRule(RewriteRule):
    name = "uint8-input-cast"
    description = "uint8 input -> layout ops -> Cast: the Cast moved to the input, the layout ops in float"
    ops = (("", "Cast"),)
    claims_ops = False  # a Cast is this rule's only where a uint8 input reaches it: settles() says where

    def may_apply(self, node: onnx.NodeProto, facts: ModelFacts) -> bool:
        """Only a model with a uint8 graph input has a site."""
        return TensorProto.UINT8 in facts.input_types.values()

    def settles(self, node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                producer: Mapping[str, onnx.NodeProto]) -> bool:
        """A layout op ``check`` refuses for its uint8 input, on the way from a graph input."""
        if node.op_type not in LAYOUT or not all(r == "dtype" and "UINT8" in m for r, m in errors):
            return False
        name = node.input[0] if node.input else ""
        for _ in range(16):
            p = producer.get(name)
            if p is None:
                return bool(name)
            if p.op_type not in LAYOUT or not p.input:
                return False
            name = p.input[0]
        return False

    def match(self, node: gs.Node, ctx: RuleContext) -> Uint8Match | None:
        to = int(node.attrs.get("to", 0))
        if to not in FLOAT_TARGETS:
            return None
        chain: list[gs.Node] = []
        cur = node.inputs[0]
        while True:
            p = producer(cur)
            if p is None:
                break
            if p.op not in LAYOUT or sole_consumer(cur, ctx.graph_outputs) is None:
                return None
            chain.append(p)
            cur = p.inputs[0]
        graph_inputs = {t.name for t in ctx.graph.inputs}
        if not chain or cur.name not in graph_inputs or cur.dtype is None or np.dtype(cur.dtype) != np.uint8:
            return None
        chain.reverse()
        return Uint8Match(cur, tuple(chain), tuple(tuple(n.inputs[1:]) for n in chain),
                          tuple(dict(n.attrs) for n in chain), to, Original.of([*chain, node]))

    def emit(self, ctx: RuleContext, site: Site, match: Uint8Match) -> Emitted:
        detach(match.chain)
        em = Emitter(ctx.graph, site.name)
        dtype = helper.tensor_dtype_to_np_dtype(match.to)
        cur: gs.Tensor = em.var("cast", dtype=dtype)
        em.node("Cast", "cast", [match.source], [cur], {"to": match.to})
        for k, (n, others, attrs) in enumerate(zip(match.chain, match.chain_inputs, match.chain_attrs)):
            last = k == len(match.chain) - 1
            out = site.outputs[0] if last else em.var(f"{n.op.lower()}{k}", dtype=dtype)
            em.node(n.op, f"{n.op.lower()}{k}", [cur, *others], [out], attrs)
            cur = out
        return Emitted(tuple(em.nodes), "Cast at the input, layout ops in float", absorbed=match.chain)

    def proof_case(self, ctx: RuleContext, site: Site, match: Uint8Match, emitted: Emitted) -> NodeProofCase | Proof:
        shape = tuple(d if isinstance(d, int) and d > 0 else PROOF_FILL for d in (match.source.shape or ()))
        x = np.random.default_rng(ctx.settings.seed + site.index).integers(0, 256, shape).astype(np.uint8)
        out = site.outputs[0].name
        ref = match.original.run({match.source.name: x}, out, max(ctx.opset, 13), match.to)
        return NodeProofCase(emitted.nodes, out, {match.source.name: x}, ref.astype(np.float64),
                             np.dtype(helper.tensor_dtype_to_np_dtype(match.to)), max(ctx.opset, 13),
                             shapes={"input": shape})
