"""Fold inference-mode BatchNormalization into the Conv before it.

Why FP16 needs this: a BatchNormalization's running variance can exceed FP16's
range (PP-OCRv4's detector has one near 1e8), and the Conv feeding it produces
activations of the same order. Folded, the pair becomes one Conv whose output is
already normalized, so neither the huge variance nor the huge activation exists any
more. The fold is exact algebra in float64, applied before any precision decision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtconv.load.external import tensor_array
from trtconv.onnxutil.constants import remove_unused_constants
from trtconv.onnxutil.names import fresh_name, model_names
from trtconv.onnxutil.walk import iter_graphs


@dataclass(frozen=True)
class FoldedBatchNorm:
    batchnorm: str  # node name (or its output if unnamed)
    conv: str
    graph: str


class _Constants:
    """Initializers and Constant-node values of one graph, by tensor name, turned into arrays
    only when asked for (converting every weight up front would copy the whole model)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        inputs = {i.name for i in graph.input}
        self._protos = {t.name: t for t in graph.initializer if t.name not in inputs}
        for node in graph.node:
            if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
                self._protos[node.output[0]] = node.attribute[0].t

    def get(self, name: str) -> np.ndarray | None:
        t = self._protos.get(name)
        return None if t is None else tensor_array(t)  # also an initializer left on disk


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return a.f if a.type == onnx.AttributeProto.FLOAT else a.i
    return default


def _uses(model: onnx.ModelProto) -> dict[str, int]:
    """How often each tensor name is read, in any graph (subgraphs read outer names too)."""
    count: dict[str, int] = {}
    for g in iter_graphs(model.graph):
        for n in g.node:
            for i in n.input:
                count[i] = count.get(i, 0) + 1
        for o in g.output:
            count[o.name] = count.get(o.name, 0) + 1
    return count


def fold_batchnorms(model: onnx.ModelProto, *, copy: bool = True) -> tuple[onnx.ModelProto, tuple[FoldedBatchNorm, ...]]:
    """A copy of ``model`` (``copy=False``: ``model`` itself, edited in place) with every
    foldable Conv→BatchNormalization pair folded.

    Foldable: the Conv's output feeds only that BatchNormalization, Conv weights/bias and
    all BN parameters are constants, and the BN runs in inference mode.
    """
    out = model
    if copy:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    uses = _uses(out)
    taken = model_names(out)
    folded: list[FoldedBatchNorm] = []
    for gi, graph in enumerate(iter_graphs(out.graph)):
        consts = _Constants(graph)
        producer = {o: n for n in graph.node for o in n.output}
        drop: list[onnx.NodeProto] = []
        for bn in graph.node:
            if bn.op_type != "BatchNormalization" or len(bn.output) != 1 or _attr(bn, "training_mode", 0):
                continue
            if _attr(bn, "spatial", 1) != 1 or len(bn.input) != 5:
                continue
            conv = producer.get(bn.input[0])
            if conv is None or conv.op_type != "Conv" or uses.get(bn.input[0], 0) != 1:
                continue
            params = [consts.get(n) for n in bn.input[1:]]
            w = consts.get(conv.input[1]) if len(conv.input) > 1 else None
            b = consts.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
            if w is None or any(p is None for p in params) or (len(conv.input) > 2 and conv.input[2] and b is None):
                continue
            scale, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
            if w.dtype != np.float32 or scale.shape != (w.shape[0],):
                continue
            eps = float(_attr(bn, "epsilon", 1e-5))
            factor = scale / np.sqrt(var + eps)
            w_new = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            b_old = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
            b_new = ((b_old - mean) * factor + beta).astype(np.float32)
            w_name = fresh_name(conv.input[1] + "_bnfold", taken)
            b_name = fresh_name((conv.input[2] if b is not None else conv.output[0]) + "_bias_bnfold", taken)
            graph.initializer.append(numpy_helper.from_array(w_new, w_name))
            graph.initializer.append(numpy_helper.from_array(b_new, b_name))
            conv.input[1] = w_name
            if len(conv.input) > 2:
                conv.input[2] = b_name
            else:
                conv.input.append(b_name)
            conv.output[0] = bn.output[0]
            drop.append(bn)
            folded.append(FoldedBatchNorm(bn.name or bn.output[0], conv.name or conv.output[0],
                                          "main" if gi == 0 else f"subgraph {gi}"))
        for n in drop:
            graph.node.remove(n)
    remove_unused_constants(out)  # the BN parameters just folded away
    return out, tuple(folded)
