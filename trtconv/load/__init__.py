"""Stage 1, load: read and check the ONNX, external data and all; infer shapes."""

from trtconv.load.external import ExternalRef
from trtconv.load.proto import (
    PROTOBUF_LIMIT,
    approx_size,
    inferred_value_info,
    iter_tensors,
    structure_only,
)
from trtconv.load.read import LoadedModel, ModelSummary, file_sha256, load_model, model_sha256, summarize
from trtconv.load.save import save_model
from trtconv.load.shapes import dynamic_inputs, infer_shapes, input_dims, override_input_shapes, parse_shapes

__all__ = [
    "PROTOBUF_LIMIT",
    "ExternalRef",
    "LoadedModel",
    "ModelSummary",
    "approx_size",
    "dynamic_inputs",
    "file_sha256",
    "inferred_value_info",
    "infer_shapes",
    "input_dims",
    "iter_tensors",
    "load_model",
    "model_sha256",
    "override_input_shapes",
    "parse_shapes",
    "save_model",
    "structure_only",
    "summarize",
]
