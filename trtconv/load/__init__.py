"""Stage 1, load: read and check the ONNX, external data and all; infer shapes."""

from trtconv.load.model import (
    LoadedModel,
    ModelSummary,
    load_model,
    model_sha256,
    save_model,
    summarize,
)
from trtconv.load.shapes import dynamic_inputs, infer_shapes, input_dims, override_input_shapes, parse_shapes

__all__ = [
    "LoadedModel",
    "ModelSummary",
    "dynamic_inputs",
    "infer_shapes",
    "input_dims",
    "load_model",
    "model_sha256",
    "override_input_shapes",
    "parse_shapes",
    "save_model",
    "summarize",
]
