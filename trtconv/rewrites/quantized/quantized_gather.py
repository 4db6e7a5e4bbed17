"""``Gather`` of a quantized constant table -> ``Gather`` of the dequantized table (exact).

ONNX Runtime's quantizers (dynamic and QOperator) quantize embedding tables: a ``Gather`` reads
the uint8/int8 table and a ``DequantizeLinear`` (dynamic) or the next QOperator op (QOperator)
dequantizes the rows it picked. TensorRT's ``Gather`` takes no 8-bit data ("input 0 has dtype
UINT8"). Dequantizing commutes with picking rows, so the table is dequantized once, as ONNX
Runtime computes it, and the ``Gather`` reads float; the ``DequantizeLinear`` after it then
reads float and becomes an ``Identity`` (:mod:`.qdq_boundary`), a QOperator op reads it as a
float activation (:mod:`.qoperator`). The node proof runs the original ``Gather`` in ONNX Runtime
and dequantizes its rows.

Ops: ``Gather`` (data a constant uint8/int8 table whose every reader dequantizes it with one
constant per-tensor scale and zero point); opsets: all; targets: all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.quantized.graphs import INT_RANGES, QOPERATOR_OPS, Original, const, dequantized
from trtconv.rewrites.rule import Emitted, ModelFacts, RewriteRule, RuleContext, Site

PROOF_INDICES = (2, 5)


@dataclass(frozen=True)
class GatherMatch:
    table: np.ndarray  # dequantized, float32
    qtype: np.dtype  # the quantized table's
    axis: int
    scale: np.ndarray
    zero: np.ndarray | None
    original: Original


def _scale_zero_read(t: gs.Tensor) -> list[tuple[np.ndarray, np.ndarray | None]] | None:
    """The (scale, zero point) each reader of ``t`` dequantizes it with; None when a reader does not."""
    found = []
    for c in t.outputs:
        if c.op != "DequantizeLinear" and (c.domain or "", c.op) not in QOPERATOR_OPS:
            return None
        positions = [i for i, x in enumerate(c.inputs) if x is t]
        for i in positions:
            if c.op == "DequantizeLinear" and i != 0:
                return None
            scale = const(c.inputs[i + 1]) if i + 1 < len(c.inputs) else None
            zero_t = c.inputs[i + 2] if i + 2 < len(c.inputs) and c.inputs[i + 2].name else None
            zero = const(zero_t) if zero_t is not None else None
            if scale is None or scale.size != 1 or (zero_t is not None and (zero is None or zero.size != 1)):
                return None
            found.append((scale, zero))
    return found


FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                         onnx.TensorProto.DOUBLE})


class QuantizedGatherRule(RewriteRule):
    name = "ort-quantized-gather"
    description = "Gather of a quantized (uint8/int8) constant table -> Gather of the dequantized table"
    ops = (("", "Gather"),)
    claims_ops = False  # most Gathers are float: ``check`` names this rule only where ``settles`` says so

    def may_apply(self, node: onnx.NodeProto, facts: ModelFacts) -> bool:
        """Only a Gather whose table is a constant of an integer type (a float table is no site)."""
        kind = facts.constant_types.get(node.input[0]) if node.input else None
        return kind is not None and kind not in FLOAT_TYPES

    def settles(self, node: onnx.NodeProto, errors: Sequence[tuple[str, str]],
                producer: Mapping[str, onnx.NodeProto]) -> bool:
        """A Gather ``check`` refuses only for its 8-bit data, read from no node (an initializer)."""
        return (node.op_type == "Gather" and bool(node.input) and node.input[0] not in producer
                and all(r == "dtype" and "INT8" in m and "input 0" in m for r, m in errors))

    def match(self, node: gs.Node, ctx: RuleContext) -> GatherMatch | None:
        q = const(node.inputs[0])
        out = node.outputs[0]
        if q is None or q.dtype not in INT_RANGES or out.name in ctx.graph_outputs or not out.outputs:
            return None
        reads = _scale_zero_read(out)
        if not reads:
            return None
        scale, zero = reads[0]
        if any(not np.array_equal(s, scale) or (z is None) != (zero is None) or (z is not None and zero is not None
               and (z.dtype != q.dtype or not np.array_equal(z, zero))) for s, z in reads):
            return None
        table = dequantized(q, scale, zero, 0)
        return GatherMatch(table, q.dtype, int(node.attrs.get("axis", 0)), scale, zero, Original.of([node]))

    def emit(self, ctx: RuleContext, site: Site, match: GatherMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        out = site.outputs[0]
        out.dtype = np.float32
        em.node("Gather", "gather", [em.const("table", match.table), site.inputs[1]], [out], {"axis": match.axis})
        return Emitted(tuple(em.nodes), "Gather (dequantized table)")

    def proof_case(self, ctx: RuleContext, site: Site, match: GatherMatch, emitted: Emitted) -> NodeProofCase | Proof:
        rows = match.table.shape[match.axis]
        ids_t = site.inputs[1]
        known = ctx.shapes.get(ids_t.name)
        shape = tuple(d if isinstance(d, int) and d > 0 else 3 for d in known) if known is not None else PROOF_INDICES
        dtype = np.dtype(ids_t.dtype) if ids_t.dtype is not None else np.dtype(np.int64)
        ids = np.random.default_rng(ctx.settings.seed + site.index).integers(0, rows, shape).astype(dtype)
        out = site.outputs[0].name
        qtype = helper.np_dtype_to_tensor_dtype(match.qtype)
        picked = match.original.run({ids_t.name: ids}, out, max(ctx.opset, 13), qtype)
        ref = dequantized(picked, match.scale, match.zero, 0).astype(np.float64)
        return NodeProofCase(emitted.nodes, out, {ids_t.name: ids}, ref, np.dtype(np.float32), ctx.opset,
                             shapes={"indices": shape})
