"""``SimplifiedLayerNormalization`` (ONNX Runtime registers it in the default domain; RMSNorm)
-> x / sqrt(mean(x^2) + eps) * scale over the last axis."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.layernorm import last_axis_refusal
from trtconv.rewrites.transformer.std_forms import Ops, rms_norm

DEFAULT_EPSILON = 1e-5


class SimplifiedLayerNormRule(FusedRule):
    name = "ms-simplified-layernorm"
    description = "SimplifiedLayerNormalization (ONNX Runtime contrib) -> RMSNorm in standard ops"
    domain = ""
    op = "SimplifiedLayerNormalization"

    def refusal(self, view: NodeView) -> str | None:
        if view.has_output(1):
            return "its inv_std_var output is used (a training output; not rewritten)"
        return last_axis_refusal(view)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x, scale = ins[0], ins[1]
        assert x is not None and scale is not None
        rms_norm(o, x, scale, float(attr(view, "epsilon", DEFAULT_EPSILON)), out=outs[0])
        return "RMSNorm"
