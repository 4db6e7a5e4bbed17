"""A ``Loop`` that grows a tensor by ``Concat`` each iteration -> the same values as a scan output.

torchvision's Mask R-CNN (``paste_masks_in_image``) and Keypoint R-CNN (``heatmaps_to_keypoints``)
export their per-detection loops as a loop-carried tensor that starts empty (``[0, ...]``) and gets
``Concat(carried, item, axis=0)`` each iteration. ONNX allows a carried value to change shape;
TensorRT does not: its recurrence needs the same shape in and out ("IRecurrenceLayer must have
inputs with same shape", at build, on every TensorRT: the parser accepts it). The values are those
of a scan output: each iteration's ``item``, stacked in order, then merged into the first axis.
So the carried value is dropped from the loop, ``item`` (after the same casts) becomes a scan
output, and a ``Reshape`` to ``[-1, *rest]`` (``rest`` from the empty start's shape, which also
keeps a zero-trip loop's ``[0, *rest]``) gives the final value.

Matched only where that is all the carried value does: it starts as a constant empty tensor, and
in the body it goes through ``Cast`` s to its own type into the first input of a two-input
``Concat`` on axis 0 whose result (through such ``Cast`` s) is the carried output and nothing else
reads. No arithmetic changes, so there is no node proof to run (the body reads outer values a
random node proof cannot make up: box indices, counts); the whole model's proof compares the
outputs on ONNX Runtime, and tests/rewrites/test_loop_concat.py runs both loops there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Original, Proof
from trtconv.rewrites.rule import MAX_OPSET, Emitted, RewriteRule, RuleContext, Site


@dataclass(frozen=True)
class Grown:
    """One carried value grown by Concat: its index among the carried values, the Concat, the
    casts before it and after it (applied to the item instead)."""

    index: int
    concat: gs.Node
    before: tuple[gs.Node, ...]
    after: tuple[gs.Node, ...]


@dataclass(frozen=True)
class LoopMatch:
    grown: tuple[Grown, ...]
    body: gs.Graph
    original: Original


def _constant(t: gs.Tensor) -> np.ndarray | None:
    if isinstance(t, gs.Constant):
        return np.asarray(t.values)
    if len(t.inputs) == 1 and t.inputs[0].op == "Constant":
        v = t.inputs[0].attrs.get("value")
        return np.asarray(v.values) if isinstance(v, gs.Constant) else None
    return None


def _starts_empty(t: gs.Tensor) -> bool:
    """Whether ``t`` is provably ``[0, ...]``: a constant, or a ``ConstantOfShape`` whose shape is a
    constant or a ``Concat`` starting with a constant, beginning with 0."""
    value = _constant(t)
    if value is not None:
        return value.ndim >= 1 and value.shape[0] == 0
    if len(t.inputs) != 1 or t.inputs[0].op != "ConstantOfShape":
        return False
    shape = t.inputs[0].inputs[0]
    head = _constant(shape)
    if head is None and len(shape.inputs) == 1 and shape.inputs[0].op == "Concat" and shape.inputs[0].inputs:
        head = _constant(shape.inputs[0].inputs[0])
    return head is not None and head.ndim == 1 and head.size >= 1 and int(head[0]) == 0


def _casts(t: gs.Tensor, dtype: object, forward: bool) -> tuple[list[gs.Node], gs.Tensor]:
    """Single-reader ``Cast`` s to ``dtype`` from ``t`` (forward: through its readers; back: its
    producers), and the tensor the chain ends at."""
    chain: list[gs.Node] = []
    to = {np.dtype(np.float32): 1, np.dtype(np.float16): 10, np.dtype(np.float64): 11}.get(np.dtype(dtype))
    while True:
        if forward:
            nxt = t.outputs[0] if len(t.outputs) == 1 else None
        else:
            nxt = t.inputs[0] if len(t.inputs) == 1 and len(t.inputs[0].inputs) == 1 else None
            nxt = nxt if nxt is not None and len(nxt.inputs[0].outputs) == 1 else None
        if nxt is None or nxt.op != "Cast" or to is None or nxt.attrs.get("to") != to:
            return chain, t
        chain.append(nxt)
        t = nxt.outputs[0] if forward else nxt.inputs[0]


def _grown(node: gs.Node, body: gs.Graph, j: int) -> Grown | None:
    carried_in, carried_out = body.inputs[2 + j], body.outputs[1 + j]
    if not _starts_empty(node.inputs[2 + j]) or carried_in.dtype is None or carried_out.outputs or \
            sum(o is carried_out for o in body.outputs) != 1:
        return None
    before, t = _casts(carried_in, carried_in.dtype, forward=True)
    concat = t.outputs[0] if len(t.outputs) == 1 else None
    if concat is None or concat.op != "Concat" or int(concat.attrs.get("axis", 0)) != 0 or \
            len(concat.inputs) != 2 or concat.inputs[0] is not t or concat.inputs[1] is t:
        return None
    after, end = _casts(carried_out, carried_in.dtype, forward=False)
    if end is not concat.outputs[0] or (after and any(o is end for o in body.outputs)):
        return None
    return Grown(j, concat, tuple(before), tuple(reversed(after)))


class LoopConcatRule(RewriteRule):
    name = "loop-concat-scan"
    description = "Loop whose carried tensor grows by Concat each iteration -> a scan output and a Reshape"
    ops = (("", "Loop"),)
    claims_ops = False  # ``check`` sees the parser accept it; the build refuses it (IRecurrenceLayer)
    opsets = (11, MAX_OPSET)  # Loop-11 and later: what exporters write today

    def match(self, node: gs.Node, ctx: RuleContext) -> LoopMatch | None:
        body = node.attrs.get("body")
        if not isinstance(body, gs.Graph) or len(body.inputs) != len(node.inputs):
            return None
        grown = tuple(g for j in range(len(node.inputs) - 2) if (g := _grown(node, body, j)) is not None)
        return LoopMatch(grown, body, Original.of([node])) if grown else None

    def emit(self, ctx: RuleContext, site: Site, match: LoopMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        body, n_carried = match.body, len(site.inputs) - 2
        kept = [j for j in range(n_carried) if j not in {g.index for g in match.grown}]
        scans = []
        for g in match.grown:
            item = g.concat.inputs[1]
            if g.after:  # the casts after the Concat now cast the item
                g.after[0].inputs[0] = item
            scans.append(g.after[-1].outputs[0] if g.after else item)
            for n in (*g.before, g.concat):
                n.inputs.clear()
                n.outputs.clear()
        body.outputs = [body.outputs[0], *(body.outputs[1 + j] for j in kept), *body.outputs[1 + n_carried:], *scans]
        body.inputs = [*body.inputs[:2], *(body.inputs[2 + j] for j in kept)]
        body.cleanup()
        stacked = [em.var(f"stacked_{g.index}", dtype=site.outputs[g.index].dtype) for g in match.grown]
        em.node("Loop", "loop", [*site.inputs[:2], *(site.inputs[2 + j] for j in kept)],
                [*(site.outputs[j] for j in kept), *site.outputs[n_carried:], *stacked], {"body": body})
        for g, s in zip(match.grown, stacked):  # [trips, k, *rest] -> [trips*k, *rest], rest from the empty start
            k = g.index
            start_shape = em.var(f"start_shape_{k}", dtype=np.int64)
            em.node("Shape", f"start_shape_{k}", [site.inputs[2 + k]], [start_shape])
            rest = em.var(f"rest_{k}", dtype=np.int64)
            em.node("Slice", f"rest_{k}", [start_shape, em.const(f"from_{k}", np.array([1], np.int64)),
                                           em.const(f"to_{k}", np.array([np.iinfo(np.int64).max], np.int64))], [rest])
            shape = em.var(f"merged_shape_{k}", dtype=np.int64)
            em.node("Concat", f"merged_shape_{k}", [em.const(f"minus1_{k}", np.array([-1], np.int64)), rest], [shape],
                    {"axis": 0})
            em.node("Reshape", f"merged_{k}", [s, shape], [site.outputs[k]])
        return Emitted(tuple(em.nodes), f"Loop with {len(scans)} scan output(s) + Reshape")

    def proof_case(self, ctx: RuleContext, site: Site, match: LoopMatch, emitted: Emitted) -> NodeProofCase | Proof:
        return Proof("none", True, reason="no arithmetic changes: the scan output stacks what the carried Concat "
                     "appended, in order; the whole model's proof compares the outputs on ONNX Runtime")
