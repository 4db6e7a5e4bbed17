"""Lookups over a whole ONNX model, subgraphs included: producers, constants, dtypes.

ONNX tensor names are model-wide (a branch reads its parent's tensors by name), so one
index serves Q/DQ placement, insertion, calibration outputs and the accuracy reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from trtconv.load.proto import structure_only
from trtconv.onnxutil.walk import iter_graphs_with_path

SHAPE_ONLY = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")
FLOAT_TYPES = (TensorProto.FLOAT,)


def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    for attr in node.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return attr.t
    return None


class Constants(Mapping[str, np.ndarray]):
    """Constant tensors by name, each turned into an array when read (not kept): arrays of
    every weight up front would be one more copy of the model for the index's whole life."""

    def __init__(self) -> None:
        self._protos: dict[str, onnx.TensorProto] = {}

    def __setitem__(self, name: str, t: onnx.TensorProto) -> None:
        self._protos[name] = t

    def __getitem__(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self._protos[name])

    def __contains__(self, name: object) -> bool:
        return name in self._protos

    def __iter__(self) -> Iterator[str]:
        return iter(self._protos)

    def __len__(self) -> int:
        return len(self._protos)


@dataclass
class ModelIndex:
    """Lookups over the whole model, subgraphs included (ONNX names are model-wide)."""

    model: onnx.ModelProto
    graphs: list[tuple[str, onnx.GraphProto]] = field(default_factory=list)
    constants: Constants = field(default_factory=Constants)
    producer: dict[str, tuple[str, onnx.NodeProto]] = field(default_factory=dict)
    dtypes: dict[str, int] = field(default_factory=dict)
    graph_inputs: set[str] = field(default_factory=set)  # main-graph inputs (fed, never computed)

    @classmethod
    def build(cls, model: onnx.ModelProto) -> ModelIndex:
        idx = cls(model)
        idx.graphs = list(iter_graphs_with_path(model.graph))
        try:
            inferred = onnx.shape_inference.infer_shapes(structure_only(model))  # dtypes need no weights
        except Exception:
            inferred = model
        for _, g in iter_graphs_with_path(inferred.graph):
            for vi in list(g.input) + list(g.value_info) + list(g.output):
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                    idx.dtypes.setdefault(vi.name, vi.type.tensor_type.elem_type)
        inits = {i.name for i in model.graph.initializer}
        idx.graph_inputs = {i.name for i in model.graph.input if i.name not in inits}
        for path, g in idx.graphs:
            for t in g.initializer:
                idx.constants[t.name] = t
                idx.dtypes[t.name] = t.data_type
            for n in g.node:
                for o in n.output:
                    idx.producer[o] = (path, n)
                if n.op_type == "Constant" and n.output:
                    val = _constant_value(n)
                    if val is not None:
                        idx.constants[n.output[0]] = val
        return idx

    def is_float(self, name: str) -> bool | None:
        dt = self.dtypes.get(name)
        if dt is None:
            return None
        return dt in FLOAT_TYPES

    def producer_op(self, name: str, *, through: tuple[str, ...] = ()) -> str | None:
        """The op that computes ``name``, looking back through ``through`` ops (e.g. reshapes)."""
        for _ in range(32):
            p = self.producer.get(name)
            if p is None:
                return None
            if p[1].op_type not in through or not p[1].input:
                return p[1].op_type
            name = p[1].input[0]
        return None
