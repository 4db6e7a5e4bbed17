"""``com.microsoft::QuickGelu`` (x * sigmoid(alpha x), CLIP's activation) -> Mul, Sigmoid, Mul."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.std_forms import Ops

DEFAULT_ALPHA = 1.702  # ONNX Runtime's default


class QuickGeluRule(FusedRule):
    name = "ms-quick-gelu"
    description = "com.microsoft QuickGelu -> x * Sigmoid(alpha * x)"
    op = "QuickGelu"

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x = ins[0]
        assert x is not None
        alpha = float(attr(view, "alpha", DEFAULT_ALPHA))
        s = o.op("Sigmoid", [o.op("Mul", [x, o.const(alpha)])])
        o.op("Mul", [x, s], out=outs[0])
        return "Mul+Sigmoid+Mul"
