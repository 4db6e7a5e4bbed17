"""``com.microsoft::BiasGelu`` (GELU of A + B) -> Add then the Erf GELU."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule
from trtconv.rewrites.transformer.std_forms import Ops, gelu_erf


class BiasGeluRule(FusedRule):
    name = "ms-bias-gelu"
    description = "com.microsoft BiasGelu -> Add + Erf GELU"
    op = "BiasGelu"

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        a, b = ins[0], ins[1]
        assert a is not None and b is not None
        gelu_erf(o, o.op("Add", [a, b]), out=outs[0])
        return "Add+GELU"
