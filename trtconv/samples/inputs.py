"""What a model expects of its inputs, the yardstick every sample is checked against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from trtconv.load.shapes import input_dims

Sample = dict[str, np.ndarray]
Dim = int | str | None


@dataclass(frozen=True)
class InputSpec:
    """What the model expects of one input: element type and dims (int fixed, str/None dynamic)."""

    dtype: np.dtype
    dims: tuple[Dim, ...]


def model_inputs(model: onnx.ModelProto) -> dict[str, InputSpec]:
    """The model's real inputs (initializers excluded) as :class:`InputSpec`."""
    inits = {i.name for i in model.graph.initializer}
    dims = input_dims(model)
    out: dict[str, InputSpec] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        out[vi.name] = InputSpec(dt, tuple(dims.get(vi.name, [])))
    return out
