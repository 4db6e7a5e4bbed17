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

from trtconv.load import LAZY_TENSOR_MIN, is_lazy, spill_tensor
from trtconv.onnxutil import GraphView, cleanup, fresh_name, model_names


@dataclass(frozen=True)
class FoldedBatchNorm:
    batchnorm: str  # node name (or its output if unnamed)
    conv: str
    graph: str


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return a.f if a.type == onnx.AttributeProto.FLOAT else a.i
    return default


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
    view = GraphView(out)  # the model before the folds: each reads only names no fold renames
    taken = model_names(out)
    folded: list[FoldedBatchNorm] = []
    for gi, (_, graph) in enumerate(view.graphs):
        drop: list[onnx.NodeProto] = []
        for bn in graph.node:
            if bn.op_type != "BatchNormalization" or len(bn.output) != 1 or _attr(bn, "training_mode", 0):
                continue
            if _attr(bn, "spatial", 1) != 1 or len(bn.input) != 5:
                continue
            site = view.producer(bn.input[0])
            if site is None or site.graph is not graph or site.node.op_type != "Conv" or view.uses(bn.input[0]) != 1:
                continue
            conv = site.node
            params = [view.value(n, overridable=False) for n in bn.input[1:]]
            w = view.value(conv.input[1], overridable=False) if len(conv.input) > 1 else None
            b = view.value(conv.input[2], overridable=False) if len(conv.input) > 2 and conv.input[2] else None
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
            folded_w = numpy_helper.from_array(w_new, w_name)
            source = view.constant(conv.input[1], overridable=False)
            if source is not None and is_lazy(source) and w_new.nbytes >= LAZY_TENSOR_MIN:
                folded_w = spill_tensor(folded_w)  # read from disk, folded, back to disk: never all in memory
            graph.initializer.append(folded_w)
            del w, w_new
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
    cleanup(out)  # the BN parameters just folded away
    return out, tuple(folded)
