"""``com.microsoft::BiasAdd`` (X + bias + skip, from Stable Diffusion's UNet fusions) -> two Adds.

ONNX Runtime implements it on CUDA only, so the proof compares with X + bias + skip in float64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule
from trtconv.rewrites.transformer.std_forms import Ops


class BiasAddRule(FusedRule):
    name = "ms-bias-add"
    description = "com.microsoft BiasAdd -> Add + Add"
    op = "BiasAdd"

    def reference(self, view: NodeView, values: Mapping[int, np.ndarray]) -> list[np.ndarray]:
        x, bias, skip = (values[i].astype(np.float64) for i in range(3))
        return [x + bias + skip]

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x, bias, skip = ins[0], ins[1], ins[2]
        assert x is not None and bias is not None and skip is not None
        o.op("Add", [o.op("Add", [x, bias]), skip], out=outs[0])
        return "Add+Add"
