"""``com.microsoft::MatMulNBits`` (ONNX Runtime's ``MatMulNBitsQuantizer``, 4-bit blocked weights)
-> ``MatMul`` on the same weights in a form TensorRT takes.

``MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?)`` holds the transposed weight ``[N, K]``
as packed unsigned ``bits``-bit values in blocks of ``block_size`` along K, one scale (and zero
point, 2^(bits-1) when absent) per block. TensorRT has no importer for it. Symmetric 4-bit weights
(no zero points, or all 8) become what TensorRT builds weight-only INT4 from: an int4
``DequantizeLinear`` with ``block_size`` (opset 21) of ``q - 8`` feeding the ``MatMul``, the same
numbers. In a model below opset 21, or with zero points or other widths, the weights are
dequantized to a float constant as ONNX Runtime computes them (the same numbers too; the
weights then take 8x the memory of int4). The node proof runs the original in ONNX Runtime.

Ops: ``com.microsoft::MatMulNBits``; opsets: all; targets: all. Declined: ``g_idx`` (act-order),
non-constant weights, scales or zero points, widths other than 2-8 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof, bound_rtol
from trtconv.rewrites.quantized.graphs import MS_DOMAIN, Original, concrete, const, given, matmul_bias
from trtconv.rewrites.rule import Emitted, NodeView, RewriteRule, RuleContext, Site

A, B, SCALES, ZEROS, G_IDX, BIAS = range(6)
INT4_OPSET = 21  # DequantizeLinear of int4 with block_size
PROOF_ROWS = 3


@dataclass(frozen=True)
class NBitsMatch:
    x: gs.Tensor
    weight: np.ndarray  # [K, N] float32, dequantized as ONNX Runtime does
    int4: np.ndarray | None  # [K, N] int4 values (q - 8) for the DequantizeLinear form, or None
    scales: np.ndarray  # [K / block, N]
    block: int
    bias: np.ndarray | None
    step: float  # accuracy_level 4 quantizes A per block to int8: that rounding's bound, else 0
    original: Original


def unpack(packed: np.ndarray, bits: int, n: int, k: int) -> np.ndarray:
    """[N, blocks, blob] packed unsigned ``bits``-bit values, low bits first -> [N, K] integers."""
    raw = np.unpackbits(packed.reshape(n, -1)[..., None], axis=-1, bitorder="little")  # [N, bytes, 8]
    per_row = raw.reshape(n, -1)[:, : (raw.shape[1] * 8 // bits) * bits].reshape(n, -1, bits)
    values = (per_row.astype(np.int64) << np.arange(bits)).sum(-1)
    return values[:, :k]


def _zeros(z: np.ndarray | None, bits: int, n: int, blocks: int) -> np.ndarray:
    """Per-(row, block) zero points: packed like B when uint8, as given when float, 2^(bits-1) when absent."""
    if z is None:
        return np.full((n, blocks), 2 ** (bits - 1), np.float64)
    if z.dtype == np.uint8:
        return unpack(z, bits, n, blocks).astype(np.float64)
    return z.astype(np.float64).reshape(n, blocks)


def _read(node: gs.Node, ctx: RuleContext) -> NBitsMatch | None:
    k, n = int(node.attrs.get("K", 0)), int(node.attrs.get("N", 0))
    bits, block = int(node.attrs.get("bits", 4)), int(node.attrs.get("block_size", 0))
    packed, scales = const(given(node, B)), const(given(node, SCALES))
    z_t, b_t = given(node, ZEROS), given(node, BIAS)
    zero = const(z_t) if z_t is not None else None
    bias = const(b_t) if b_t is not None else None
    if given(node, G_IDX) is not None or packed is None or packed.dtype != np.uint8 or scales is None \
            or not 2 <= bits <= 8 or block <= 0 or k <= 0 or n <= 0 \
            or (z_t is not None and zero is None) or (b_t is not None and bias is None):
        return None
    blocks = -(-k // block)
    if scales.size != n * blocks or (zero is not None and zero.dtype != np.uint8 and zero.size != n * blocks):
        return None
    q = unpack(packed, bits, n, blocks * block)  # [N, blocks * block]
    z = _zeros(zero, bits, n, blocks)
    s = scales.astype(np.float32).reshape(n, blocks)
    per_k = np.repeat(np.arange(blocks), block)
    w = ((q - z[:, per_k]).astype(np.float32) * s[:, per_k])[:, :k]  # ONNX Runtime's float32 (q - zp) * scale
    symmetric = bits == 4 and bool(np.all(z == 8)) and k % block == 0
    int4 = (q[:, :k] - 8).T.astype(ml_dtypes.int4) if symmetric and ctx.opset >= INT4_OPSET else None
    level = int(node.attrs.get("accuracy_level", 0) or 0)
    return NBitsMatch(node.inputs[A], np.ascontiguousarray(w.T), int4, np.ascontiguousarray(s.T), block,
                      None if bias is None else bias.astype(np.float32), 1.0 if level == 4 else 0.0,
                      Original.of([node]))


class MatMulNBitsRule(RewriteRule):
    name = "ort-matmul-nbits"
    description = ("com.microsoft::MatMulNBits (4-bit blocked weights) -> int4 blocked DequantizeLinear + MatMul "
                   "(opset 21+, symmetric), else MatMul on dequantized weights")
    ops = ((MS_DOMAIN, "MatMulNBits"),)

    def refusal(self, view: NodeView) -> str | None:
        if view.has_input(G_IDX):
            return "g_idx (act-order block indices) is not rewritten"
        bits = int(view.attrs.get("bits", 4) or 4)
        return None if 2 <= bits <= 8 else f"bits={bits}: only 2-8 are rewritten"

    def match(self, node: gs.Node, ctx: RuleContext) -> NBitsMatch | None:
        return _read(node, ctx)

    def emit(self, ctx: RuleContext, site: Site, match: NBitsMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        out = site.outputs[0]
        out.dtype = np.float32
        if match.int4 is not None:
            w = em.var("weight", dtype=np.float32)
            q = gs.Constant(f"{site.name}/int4", LazyValues(numpy_helper.from_array(match.int4)))
            em.node("DequantizeLinear", "dequantize", [q, em.const("scales", match.scales)], [w],
                    {"axis": 0, "block_size": match.block})
            target, notes = "DequantizeLinear (int4, blocked)+MatMul", ()
        else:
            w = em.const("weight", match.weight)
            target = "MatMul (dequantized weights)"
            notes = (f"weights kept in float: int4 needs a symmetric 4-bit form and opset {INT4_OPSET} (the model is "
                     f"opset {ctx.opset}); re-export at opset {INT4_OPSET} for TensorRT's int4 weights",)
        if matmul_bias(em, match.x, w, match.bias, out) == "MatMul+Add":
            target += "+Add"
        return Emitted(tuple(em.nodes), target, notes)

    def proof_case(self, ctx: RuleContext, site: Site, match: NBitsMatch, emitted: Emitted) -> NodeProofCase | Proof:
        k = match.weight.shape[0]
        known = ctx.shapes.get(match.x.name)
        shape = concrete(known, [1] * (len(known) - 2) + [PROOF_ROWS, k]) if known else None
        shape = shape or (PROOF_ROWS, k)
        x = np.random.default_rng(ctx.settings.seed + site.index).standard_normal(shape).astype(np.float32)
        out = site.outputs[0].name
        expected = match.original.run({match.x.name: x}, out, max(ctx.opset, 13))
        # accuracy_level 4: ONNX Runtime rounds A to int8 per block (step max|A|/127): that bound, else float32's
        bound = match.step * float(np.abs(x).max()) / 127 / 2 * float(np.abs(match.weight).sum(axis=0).max())
        rtol = bound_rtol(bound, expected, max(ctx.settings.node_tolerance, 1e-5))
        opset = max(ctx.opset, INT4_OPSET) if match.int4 is not None else ctx.opset
        return NodeProofCase(emitted.nodes, out, {match.x.name: x}, expected.astype(np.float64), np.dtype(np.float32),
                             opset, rtol=rtol, shapes={"a": shape})
