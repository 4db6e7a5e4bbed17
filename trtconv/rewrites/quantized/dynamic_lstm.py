"""``com.microsoft::DynamicQuantizeLSTM`` -> ONNX ``LSTM`` on dequantized weights.

ONNX Runtime's quantized LSTM keeps W and R as int8 with a scale and zero point per direction
(or per gate column), stored transposed against ONNX's LSTM: W ``[dirs, input, 4*hidden]``, R
``[dirs, hidden, 4*hidden]`` where ``LSTM`` wants ``[dirs, 4*hidden, input|hidden]``. Gate order
(i, o, f, c), bias, sequence lengths, initial states, peepholes and every attribute are ONNX's.
The per-step quantization of X and H is dropped, so the numbers change by the original's own
quantization noise. The node proof separates the two: one step of the original equals the float
LSTM run on X and H rounded to ONNX Runtime's own uint8 grid (:func:`on_uint8_grid`), so the
replacement is run on those rounded values and held to float32 accumulation error
(:func:`grid_tolerance`): layout, gate order, directions and bias are proven exactly, and what the
rule drops is the rounding alone, at most half a quantization step per element of X and H
(docs/rewrite.md derives it; the whole model's drift is measured and recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.quantized.graphs import MS_DOMAIN, Original, const, given
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

# One step: there the original's rounding of X and H is known from its inputs (later steps round
# a state only the original sees).
PROOF_STEPS, PROOF_BATCH = 1, 2
UINT8_MAX = 255
FLOAT32_EPS = float(np.finfo(np.float32).eps)
DROPPED = ("the per-step uint8 quantization of X and H inside DynamicQuantizeLSTM is dropped: the original's own "
           "rounding (at most half a step per element) is what changes; node proof: the float LSTM on the "
           "original's rounded X and H equals it")


def on_uint8_grid(v: np.ndarray) -> np.ndarray:
    """``v`` as ONNX Runtime's dynamic uint8 quantization sees it: range stretched to hold 0, scale
    range / 255, zero point and values rounded half to even and saturated, then dequantized."""
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    scale = np.float32((hi - lo) / UINT8_MAX)
    if scale == 0:
        return v.copy()
    zero = np.clip(np.round(-lo / scale), 0, UINT8_MAX)
    q = np.clip(np.round(v / scale) + zero, 0, UINT8_MAX)
    return ((q - zero) * scale).astype(v.dtype)


def rounded_state(h: np.ndarray) -> np.ndarray:
    """An initial hidden state [dirs, batch, hidden] as the original rounds it: per direction and batch row."""
    return np.stack([np.stack([on_uint8_grid(row) for row in direction]) for direction in h])


def state_rounding_bound(r: np.ndarray, h0: np.ndarray, c0: np.ndarray | None) -> float:
    """How far one step's h moves when H0 is not rounded as the original rounds it: each element of
    H0 by at most one step s_h, a gate's pre-activation by a = max_row(sum |R|) s_h, sigmoid gates by
    a/4, tanh by a, c1 by (|c0|/4 + 5/4) a, h1 by a/4 more (docs/rewrite.md)."""
    moved = np.abs(rounded_state(h0).astype(np.float64) - h0).max() if h0.size else 0.0
    if moved == 0:
        return 0.0
    steps = [(max(float(row.max()), 0.0) - min(float(row.min()), 0.0)) / UINT8_MAX for d in h0 for row in d]
    a = float(np.abs(r).sum(axis=2).max()) * max(steps)
    c_max = float(np.abs(c0).max()) if c0 is not None and c0.size else 0.0
    return a / 4 + (c_max / 4 + 1.25) * a


def grid_tolerance(size: int, hidden: int, node_tolerance: float) -> float:
    """float32 against the original's int32 accumulation: a gate sums size + hidden products, each
    rounded once (relative error eps), so 4 eps per term is ample; never below ``node_tolerance``."""
    return max(node_tolerance, 4 * FLOAT32_EPS * (size + hidden))


@dataclass(frozen=True)
class LstmMatch:
    w: np.ndarray  # [dirs, 4*hidden, input], float32
    r: np.ndarray  # [dirs, 4*hidden, hidden], float32
    attrs: dict[str, Any]  # ONNX LSTM's, as the original has them
    original: Original


def _weights(q: np.ndarray | None, scale: np.ndarray | None, zero: np.ndarray | None) -> np.ndarray | None:
    """[dirs, rows, 4h] int8 with per-direction (or per-direction-and-column) scale -> [dirs, 4h, rows] float."""
    if q is None or scale is None or q.ndim != 3:
        return None
    dirs, cols = q.shape[0], q.shape[2]
    z = np.zeros_like(scale, dtype=np.float64) if zero is None else zero
    if scale.size not in (dirs, dirs * cols) or z.size != scale.size:
        return None
    s = scale.reshape(dirs, 1, -1).astype(np.float64)
    zz = z.reshape(dirs, 1, -1).astype(np.float64)
    return np.transpose((q.astype(np.float64) - zz) * s, (0, 2, 1)).astype(np.float32)


class DynamicLstmRule(RewriteRule):
    name = "ort-dynamic-lstm"
    description = "com.microsoft::DynamicQuantizeLSTM -> LSTM on dequantized weights"
    ops = ((MS_DOMAIN, "DynamicQuantizeLSTM"),)

    def match(self, node: gs.Node, ctx: RuleContext) -> LstmMatch | None:
        def c(i: int) -> np.ndarray | None:
            t = given(node, i)
            return const(t) if t is not None else None
        w = _weights(c(1), c(8), c(9))
        r = _weights(c(2), c(10), c(11))
        if w is None or r is None or any(given(node, i) is not None and c(i) is None for i in (9, 11)):
            return None
        return LstmMatch(w, r, dict(node.attrs), Original.of([node]))

    def emit(self, ctx: RuleContext, site: Site, match: LstmMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        empty = gs.Variable.empty()
        ins = [site.inputs[0], em.const("W", match.w), em.const("R", match.r)]
        ins += [site.inputs[i] if i < len(site.inputs) else empty for i in range(3, 8)]
        while ins and not ins[-1].name:
            ins.pop()
        em.node("LSTM", "lstm", ins, list(site.outputs), match.attrs)
        cuts = frozenset(o.name for o in site.outputs if o.name)
        return Emitted(tuple(em.nodes), "LSTM (dequantized weights)", (DROPPED,), graph_cuts=cuts, exact=False)

    def proof_case(self, ctx: RuleContext, site: Site, match: LstmMatch, emitted: Emitted) -> NodeProofCase | Proof:
        proto = match.original.nodes[0]
        dirs, four_h, size = match.w.shape
        hidden = four_h // 4
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        batch = next((int(match.original.constants[n].shape[1]) for n in proto.input[5:7]
                      if n in match.original.constants), PROOF_BATCH)  # constant initial states fix the batch
        shapes = {0: (PROOF_STEPS, batch, size), 5: (dirs, batch, hidden), 6: (dirs, batch, hidden),
                  3: (dirs, 8 * hidden), 7: (dirs, 3 * hidden)}
        values: dict[str, np.ndarray] = {}
        for i, name in enumerate(proto.input):
            if not name or name in match.original.constants:
                continue
            if i == 4:
                values[name] = np.full((batch,), PROOF_STEPS, np.int32)
            elif i in shapes:
                values[name] = (rng.standard_normal(shapes[i]) * (1.0 if i == 0 else 0.5)).astype(np.float32)
            else:
                return Proof("none", False, reason=f"input {i} of DynamicQuantizeLSTM is not a constant")
        out = next(o for o in proto.output if o)
        expected = match.original.run(values, out, max(ctx.opset, 14), TensorProto.FLOAT).astype(np.float64)
        rounded = dict(values)  # the replacement reads X and H as the original rounded them
        rounded[proto.input[0]] = on_uint8_grid(values[proto.input[0]])
        h0 = proto.input[5] if len(proto.input) > 5 else ""
        rtol = grid_tolerance(size, hidden, ctx.settings.node_tolerance)
        if h0 in values:
            rounded[h0] = rounded_state(values[h0])
        elif h0 in match.original.constants:  # a constant the replacement reads as it is: its rounding, bounded
            c0 = proto.input[6] if len(proto.input) > 6 else ""
            rtol += state_rounding_bound(match.r, match.original.constants[h0],
                                         values.get(c0, match.original.constants.get(c0)))
        return NodeProofCase(emitted.nodes, out, rounded, expected, np.dtype(np.float32), max(ctx.opset, 14),
                             rtol=rtol, shapes={"X": shapes[0]})

