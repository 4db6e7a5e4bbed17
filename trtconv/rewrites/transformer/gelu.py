"""``com.microsoft::Gelu`` -> x * (1 + erf(x / sqrt 2)) * 0.5, the form PyTorch exports and
TensorRT fuses (TensorRT-RTX has no importer for the contrib op)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule
from trtconv.rewrites.transformer.std_forms import Ops, gelu_erf


class GeluRule(FusedRule):
    name = "ms-gelu"
    description = "com.microsoft Gelu -> Erf GELU"
    op = "Gelu"

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        assert ins[0] is not None
        gelu_erf(o, ins[0], out=outs[0])
        return "Div+Erf+Add+Mul (GELU)"
