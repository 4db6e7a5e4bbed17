"""``com.microsoft::SkipLayerNormalization`` -> Add(input, skip[, bias]) then LayerNormalization
(the ONNX op from opset 17, else its decomposition). Output 3, the sum, is the Add's output."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.std_forms import Ops, layer_norm

DEFAULT_EPSILON = 1e-12  # ONNX Runtime's default for the skip norms


def skip_sum(o: Ops, ins: Sequence[gs.Tensor | None], bias_index: int, out: gs.Tensor | None) -> gs.Tensor:
    """input + skip (+ bias), in ONNX Runtime's order; ``out``: the op's input_skip_bias_sum output."""
    x, skip = ins[0], ins[1]
    assert x is not None and skip is not None
    bias = ins[bias_index] if len(ins) > bias_index else None
    if bias is None:
        return o.op("Add", [x, skip], out=out)
    return o.op("Add", [o.op("Add", [x, skip]), bias], out=out)


def saved_stats_refusal(view: NodeView) -> str | None:
    """Outputs 1 and 2 (saved mean / inverse std, for training) have no standard-op counterpart here."""
    if view.has_output(1) or view.has_output(2):
        return "its saved mean / inv_std_var outputs are used (training outputs; not rewritten)"
    return None


class SkipLayerNormRule(FusedRule):
    name = "ms-skip-layernorm"
    description = "com.microsoft SkipLayerNormalization -> Add + LayerNormalization"
    op = "SkipLayerNormalization"

    def refusal(self, view: NodeView) -> str | None:
        return saved_stats_refusal(view)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        s = skip_sum(o, ins, 4, outs[3] if len(outs) > 3 else None)
        gamma = ins[2]
        assert gamma is not None
        beta = ins[3] if len(ins) > 3 else None
        layer_norm(o, s, gamma, beta, float(attr(view, "epsilon", DEFAULT_EPSILON)), out=outs[0])
        return "Add+LayerNormalization" if o.opset >= 17 else "Add+LayerNorm decomposition"
