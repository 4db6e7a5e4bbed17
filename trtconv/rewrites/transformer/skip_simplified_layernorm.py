"""``com.microsoft::SkipSimplifiedLayerNormalization`` (T5's residual + RMSNorm) -> Add(input,
skip[, bias]) then x / sqrt(mean(x^2) + eps) * gamma."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.skip_layernorm import DEFAULT_EPSILON, saved_stats_refusal, skip_sum
from trtconv.rewrites.transformer.std_forms import Ops, rms_norm


class SkipSimplifiedLayerNormRule(FusedRule):
    name = "ms-skip-simplified-layernorm"
    description = "com.microsoft SkipSimplifiedLayerNormalization -> Add + RMSNorm"
    op = "SkipSimplifiedLayerNormalization"

    def refusal(self, view: NodeView) -> str | None:
        return saved_stats_refusal(view)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        s = skip_sum(o, ins, 3, outs[3] if len(outs) > 3 else None)
        gamma = ins[2]
        assert gamma is not None
        rms_norm(o, s, gamma, float(attr(view, "epsilon", DEFAULT_EPSILON)), out=outs[0])
        return "Add+RMSNorm"
