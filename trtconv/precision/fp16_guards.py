"""Epsilon guards that FP16 erases: ``log(x² + 1e-10)``, ``x / (y + 1e-12)``, ``pow(v + eps, -0.5)``.

An exporter writes such an epsilon to keep a function that is singular at zero (Log, Reciprocal, a
Div's divisor, Pow with a negative exponent) away from zero. An epsilon at or below 2^-25 rounds to
0 in FP16, so a value the guard was there for reaches the function as 0 and comes out -inf or inf,
then NaN downstream (Spotify's basic-pitch: ``Log(Square(cqt) + 1e-10)``, NaN in 94 of 100 real
speech windows; Whisper's front-end, ``Log(Clip(mel, 1e-10))``: inf on a silent second). Keeping the
guard, what it guards and the squares behind it in FP32 costs a few Casts (a BERT's written-out
LayerNorm: 5 nodes, 2 Casts each); the values on either side fit FP16 as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from trtconv.onnxutil import GraphView
from trtconv.precision.fp16_rules import fp16_label

FP16_ROUNDS_TO_ZERO = 2.0 ** -25  # half the smallest FP16 subnormal: this and below round to 0

# op type -> the input that must stay away from zero
_SINGULAR_INPUT = {"Log": 0, "Reciprocal": 0, "Div": 1, "Pow": 0}
# guards: an op whose constant operand keeps its result away from zero
_GUARDS = frozenset({"Add", "Max", "Clip"})
# ops a guarded value may pass through on its way to the singular one, keeping zero at zero
_PASS_THROUGH = frozenset({"Sqrt", "Abs", "Reshape", "Unsqueeze", "Squeeze", "Expand"})
# what a guarded power may be computed with, back from the guard (besides squares: Mul(x, x) and Pow)
_POWER_OPS = frozenset({"Sqrt", "Abs", "ReduceSum", "ReduceSumSquare", "ReduceMean", "Transpose", "Reshape",
                        "Squeeze", "Unsqueeze", "Identity"})
_MAX_PATH = 16


def vanishing_guards(graph: onnx.GraphProto, view: GraphView,
                     const_value: Callable[[str], np.ndarray | None]) -> dict[int, str]:
    """Node index -> why it stays FP32, for each guard whose epsilon FP16 rounds to 0, the singular node it
    guards, and the nodes between them (in ``graph``; its constants through ``const_value``)."""
    out: dict[int, str] = {}
    for idx, node in enumerate(graph.node):
        slot = _SINGULAR_INPUT.get(node.op_type)
        if slot is None or slot >= len(node.input) or not node.input[slot]:
            continue
        if node.op_type == "Pow" and not _negative(const_value(node.input[1]) if len(node.input) > 1 else None):
            continue
        chain, name = [], node.input[slot]
        for _ in range(8):
            site = view.producer(name)
            if site is None or site.graph is not graph:
                break
            if site.node.op_type in _GUARDS:
                eps = _vanishing_epsilon(site.node, const_value)
                if eps is not None:
                    why = (f"{site.node.op_type} {fp16_label(site.node)!r} keeps {node.op_type} {fp16_label(node)!r} from "
                           f"zero with {eps:.3g}, which FP16 rounds to 0")
                    for i in (*_power_path(site.node, graph, view), site.index, *chain, idx):
                        out.setdefault(i, why)
                break
            if site.node.op_type not in _PASS_THROUGH or not site.node.input:
                break
            chain.append(site.index)
            name = site.node.input[0]
    return out


def _vanishing_epsilon(node: onnx.NodeProto, const_value: Callable[[str], np.ndarray | None]) -> float | None:
    """The guard's epsilon if it is positive and FP16 rounds every element of it to 0, else None."""
    names = node.input[1:2] if node.op_type == "Clip" else node.input  # Clip: its min; Add/Max: either operand
    for name in names:
        value = const_value(name) if name else None
        if value is None or value.dtype.kind != "f" or value.size == 0:
            continue
        peak = float(np.max(np.abs(value)))
        if 0.0 < peak <= FP16_ROUNDS_TO_ZERO:
            return peak
    return None


def _power_path(guard: onnx.NodeProto, graph: onnx.GraphProto, view: GraphView) -> list[int]:
    """The nodes that compute what the guard adds its epsilon to, back to the last square: squares, their sums and
    means, roots and moves (``log(|X|² + eps)``, ``sqrt(mean((x - m)²) + eps)``). A square halves FP16's range:
    a magnitude of 1e-3 squares to 1e-6, which FP16 holds only as a subnormal (three significant bits), and
    the log or division after the guard magnifies that; what the first square reads stays in FP16."""
    out: list[int] = []
    for name in guard.input:
        chain, last_square = [], 0
        while name and len(chain) < _MAX_PATH:
            site = view.producer(name)
            if site is None or site.graph is not graph:
                break
            n = site.node
            square = (n.op_type == "Mul" and len(n.input) == 2 and n.input[0] == n.input[1]) or n.op_type == "Pow"
            if not square and n.op_type not in _POWER_OPS:
                break
            chain.append(site.index)
            last_square = len(chain) if square else last_square
            name = n.input[0]
        out += chain[:last_square]
    return out


def _negative(exponent: np.ndarray | None) -> bool:
    return exponent is not None and exponent.size > 0 and bool(np.any(exponent < 0))
