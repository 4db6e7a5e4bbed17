"""``com.microsoft::FastGelu`` (tanh-approximated GELU of X [+ bias]) -> the tanh GELU as
PyTorch exports it (``approximate="tanh"``)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule
from trtconv.rewrites.transformer.std_forms import Ops, gelu_tanh


class FastGeluRule(FusedRule):
    name = "ms-fast-gelu"
    description = "com.microsoft FastGelu -> [Add +] tanh GELU"
    op = "FastGelu"

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x = ins[0]
        assert x is not None
        bias = ins[1] if len(ins) > 1 else None
        if bias is not None:
            x = o.op("Add", [x, bias])
        gelu_tanh(o, x, out=outs[0])
        return ("Add+" if bias is not None else "") + "tanh GELU"
