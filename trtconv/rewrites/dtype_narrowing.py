"""float64 models narrowed to float32, explicitly and said out loud.

TensorRT computes no float64: its parser accepts float64 models and narrows every tensor to
float32 without a word (measured on TensorRT-RTX 1.7: parses, builds, and the engine's input is
float32). trtconv narrows the model itself before the rules run: graph inputs and outputs,
initializers, Constant/attribute tensors, value_info, and Cast/random ops whose target type is
float64, in every subgraph. Inputs and outputs whose type changed are listed (the report's
``dtype_changes``, the manifest's too): a caller feeding float64 must now feed float32. The graph
proof runs the original in float64 and the narrowed model in float32 on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from trtconv.errors import UnsupportedModelError
from trtconv.onnxutil import iter_graphs
from trtconv.rewrites.cleanup import CleanupResult

RULE = "narrow-float64"
DOUBLE, FLOAT = TensorProto.DOUBLE, TensorProto.FLOAT
TYPE_ATTRS = {("Cast", "to"), ("EyeLike", "dtype"), ("RandomNormal", "dtype"), ("RandomUniform", "dtype"),
              ("RandomNormalLike", "dtype"), ("RandomUniformLike", "dtype"), ("Multinomial", "dtype"),
              ("ConstantOfShape", "dtype")}


@dataclass(frozen=True)
class DtypeChange:
    """An input or output of the model whose element type a rule changed."""

    kind: str  # "input" | "output"
    name: str
    before: str
    after: str
    rule: str = RULE

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "before": self.before, "after": self.after, "rule": self.rule}


def _has_double(model: onnx.ModelProto) -> bool:
    for g in iter_graphs(model.graph):
        if any(vi.type.tensor_type.elem_type == DOUBLE for vi in (*g.input, *g.output, *g.value_info)):
            return True
        if any(t.data_type == DOUBLE for t in g.initializer):
            return True
        for n in g.node:
            for a in n.attribute:
                if (a.type == onnx.AttributeProto.TENSOR and a.t.data_type == DOUBLE) or \
                        ((n.op_type, a.name) in TYPE_ATTRS and a.i == DOUBLE):
                    return True
    return False


def _narrow_tensor(t: onnx.TensorProto) -> int:
    """Narrow ``t`` in place; returns how many values left float32's range (they become +-inf)."""
    if t.data_location == TensorProto.EXTERNAL:
        raise UnsupportedModelError(f"float64 initializer {t.name!r} is stored outside the model: trtconv narrows "
                                    "float64 to float32 (TensorRT computes none) and does not stream it",
                                    hint="convert the model's float64 weights to float32 first, or load it whole")
    v = numpy_helper.to_array(t)
    finite = np.isfinite(v)
    with np.errstate(over="ignore"):
        narrowed = v.astype(np.float32)
    t.CopyFrom(numpy_helper.from_array(narrowed, t.name))
    return int(np.count_nonzero(finite & ~np.isfinite(narrowed)))


def narrow_float64(model: onnx.ModelProto) -> tuple[onnx.ModelProto, CleanupResult, tuple[DtypeChange, ...]]:
    """The model with float64 narrowed to float32 (a copy; the input as is when it holds none)."""
    if not _has_double(model):
        return model, CleanupResult(RULE, 0), ()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    changes = [DtypeChange(kind, vi.name, "float64", "float32")
               for kind, vis in (("input", out.graph.input), ("output", out.graph.output))
               for vi in vis if vi.type.tensor_type.elem_type == DOUBLE]
    tensors = casts = overflow = 0
    for g in iter_graphs(out.graph):
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.tensor_type.elem_type == DOUBLE:
                vi.type.tensor_type.elem_type = FLOAT
        for t in g.initializer:
            if t.data_type == DOUBLE:
                overflow += _narrow_tensor(t)
                tensors += 1
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == DOUBLE:
                    overflow += _narrow_tensor(a.t)
                    tensors += 1
                elif (n.op_type, a.name) in TYPE_ATTRS and a.type == onnx.AttributeProto.INT and a.i == DOUBLE:
                    a.i = FLOAT
                    casts += 1
    items = tuple(f"{c.kind} {c.name}: float64 -> float32" for c in changes)
    items += (f"{tensors} constant tensor(s)",) if tensors else ()
    items += (f"{casts} Cast/type attribute(s)",) if casts else ()
    notes = ("TensorRT computes no float64 (its parser would narrow silently): the model is float32 now, and "
             "its float64 inputs/outputs are float32 in the engine",)
    if overflow:
        notes += (f"{overflow} value(s) outside float32's range became +-inf",)
    return out, CleanupResult(RULE, len(changes) + tensors + casts, items, notes), tuple(changes)
