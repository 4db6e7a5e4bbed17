"""``LayerNormalization`` below opset 17: ONNX Runtime's contrib op of that name (ONNX added the
op at 17), which exporters and ONNX Runtime's optimizer write into opset 11-16 models -> its
decomposition (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), which TensorRT fuses."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr
from trtconv.rewrites.transformer.std_forms import LAYERNORM_OPSET, MIN_OPSET, Ops, layer_norm

DEFAULT_EPSILON = 1e-5


def last_axis_refusal(view: NodeView) -> str | None:
    """These rules normalise over the last axis only."""
    axis = int(attr(view, "axis", -1))
    rank = view.rank(0)
    if axis == -1 or (rank is not None and axis == rank - 1):
        return None
    return f"axis={axis}: only normalisation over the last axis is rewritten" + (
        "" if rank is not None else " (the input's rank is unknown)")


class LayerNormRule(FusedRule):
    name = "contrib-layernorm"
    description = "LayerNormalization at opset < 17 (ONNX Runtime contrib) -> its decomposition"
    domain = ""
    op = "LayerNormalization"
    opsets = (MIN_OPSET, LAYERNORM_OPSET - 1)

    def refusal(self, view: NodeView) -> str | None:
        if view.has_output(1) or view.has_output(2):
            return "its Mean / InvStdDev outputs are used (training outputs; not rewritten)"
        return last_axis_refusal(view)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x, scale = ins[0], ins[1]
        assert x is not None and scale is not None
        bias = ins[2] if len(ins) > 2 else None
        layer_norm(o, x, scale, bias, float(attr(view, "epsilon", DEFAULT_EPSILON)), out=outs[0])
        return "LayerNorm decomposition"
