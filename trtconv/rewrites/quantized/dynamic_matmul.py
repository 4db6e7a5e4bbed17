"""``com.microsoft::DynamicQuantizeMatMul`` and ``MatMulIntegerToFloat`` -> ``MatMul`` (+ bias
``Add``) on dequantized weights.

What ONNX Runtime's optimizer fuses dynamic quantization into. ``DynamicQuantizeMatMul(A, B,
b_scale, b_zero_point, bias)`` quantizes float A per call (uint8, the range of A and 0);
``MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias)`` takes A already
quantized by a ``DynamicQuantizeLinear``, whose float input the replacement reads instead. As for
:mod:`.dynamic_integer`, the activation rounding is dropped: the node proof holds the float
MatMul to ``scale/2 * max_j sum_k |B[k, j]|`` of ONNX Runtime's run of the original.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof, bound_rtol
from trtconv.rewrites.quantized.dynamic_integer import DROPPED
from trtconv.rewrites.quantized.graphs import (
    MS_DOMAIN,
    Original,
    const,
    dequantize,
    given,
    matmul_bias,
    producer,
    upstream,
)
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

# op -> (B, b_scale, b_zero_point, bias) input positions
LAYOUT = {"DynamicQuantizeMatMul": (1, 2, 3, 4), "MatMulIntegerToFloat": (1, 3, 5, 6)}


@dataclass(frozen=True)
class MatMulMatch:
    x: gs.Tensor  # the float activation
    weight: np.ndarray  # [K, N] float32
    bias: np.ndarray | None
    original: Original


def _read(node: gs.Node) -> MatMulMatch | None:
    b_i, s_i, z_i, bias_i = LAYOUT[node.op]
    bq, scale = const(given(node, b_i)), const(given(node, s_i))
    z_t, bias_t = given(node, z_i), given(node, bias_i)
    zero = const(z_t) if z_t is not None else None
    bias = const(bias_t) if bias_t is not None else None
    if bq is None or bq.ndim != 2 or scale is None or (z_t is not None and zero is None) or \
            (bias_t is not None and bias is None) or scale.size not in (1, bq.shape[1]):
        return None
    x = node.inputs[0]
    stop = [x]
    if node.op == "MatMulIntegerToFloat":
        dql = producer(x)
        a_zero = given(node, 4)
        if dql is None or dql.op != "DynamicQuantizeLinear" or dql.outputs[0] is not x or \
                given(node, 2) is not dql.outputs[1] or (a_zero is not None and a_zero is not dql.outputs[2]):
            return None
        x = stop[0] = dql.inputs[0]
    nodes = upstream(node.outputs[0], stop)
    if nodes is None:
        return None
    weight = dequantize(bq, scale, zero, 1).astype(np.float32)
    return MatMulMatch(x, weight, None if bias is None else bias.astype(np.float32), Original.of(nodes))


class DynamicMatMulRule(RewriteRule):
    name = "ort-dynamic-matmul"
    description = ("com.microsoft::DynamicQuantizeMatMul / MatMulIntegerToFloat -> MatMul (+ Add) on dequantized "
                   "weights")
    ops = ((MS_DOMAIN, "DynamicQuantizeMatMul"), (MS_DOMAIN, "MatMulIntegerToFloat"))

    def match(self, node: gs.Node, ctx: RuleContext) -> MatMulMatch | None:
        return _read(node)

    def emit(self, ctx: RuleContext, site: Site, match: MatMulMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        out = site.outputs[0]
        out.dtype = np.float32
        w = em.const("weight", match.weight)
        matmul_bias(em, match.x, w, match.bias, out)
        return Emitted(tuple(em.nodes), "MatMul (dequantized weights)", (DROPPED,), graph_cuts=frozenset({out.name}),
                       exact=False)

    def proof_case(self, ctx: RuleContext, site: Site, match: MatMulMatch, emitted: Emitted) -> NodeProofCase | Proof:
        known = ctx.shapes.get(match.x.name)
        shape = tuple(d if isinstance(d, int) and d > 0 else 2 for d in known) if known else (2, match.weight.shape[0])
        x = np.random.default_rng(ctx.settings.seed + site.index).standard_normal(shape).astype(np.float32)
        out = site.outputs[0].name
        expected = match.original.run({match.x.name: x}, out, max(ctx.opset, 11))
        step = (max(0.0, float(x.max())) - min(0.0, float(x.min()))) / 255.0
        bound = step / 2 * float(np.abs(match.weight.astype(np.float64)).sum(axis=0).max())
        rtol = bound_rtol(bound, expected, ctx.settings.node_tolerance)
        return NodeProofCase(emitted.nodes, out, {match.x.name: x}, expected.astype(np.float64), np.dtype(np.float32),
                             ctx.opset, rtol=rtol, shapes={"x": shape})
