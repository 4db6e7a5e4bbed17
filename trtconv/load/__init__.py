"""Stage 1, load: read and check the ONNX, external data and all; infer shapes."""

from trtconv.load.external import (
    LAZY_TENSOR_MIN,
    LAZY_WEIGHTS_BYTES,
    ExternalRef,
    copy_lazy,
    has_lazy_weights,
    is_lazy,
    tensor_array,
)
from trtconv.load.memory import (
    available_memory,
    ensure_room,
    return_large_blocks,
)
from trtconv.load.proto import (
    DATA_FIELDS,
    PROTOBUF_LIMIT,
    approx_size,
    copy_fields,
    inferred_value_info,
    inline_bytes,
    iter_tensors,
    structure_only,
    tensor_nbytes,
    weight_bytes,
)
from trtconv.load.read import (
    LoadedModel,
    ModelSummary,
    disk_bytes,
    file_sha256,
    load_model,
    model_sha256,
    summarize,
)
from trtconv.load.save import (
    save_model,
    write_scratch,
)
from trtconv.load.shapes import (
    Shape,
    dynamic_inputs,
    graph_dtypes,
    infer_shapes,
    input_dims,
    largest_static_tensor,
    override_input_shapes,
    parse_shape_spec,
    parse_shape_values,
    parse_shapes,
    shapes_text,
    value_dtypes,
    value_shapes,
)
from trtconv.load.spill import (
    lazy_as,
    spill,
    spill_tensor,
)
from trtconv.load.strip import (
    is_stripped,
)
from trtconv.load.validate import (
    check_structure_only,
)

__all__ = [
    "DATA_FIELDS",
    "LAZY_TENSOR_MIN",
    "LAZY_WEIGHTS_BYTES",
    "PROTOBUF_LIMIT",
    "ExternalRef",
    "LoadedModel",
    "ModelSummary",
    "Shape",
    "approx_size",
    "available_memory",
    "check_structure_only",
    "copy_fields",
    "copy_lazy",
    "disk_bytes",
    "dynamic_inputs",
    "ensure_room",
    "file_sha256",
    "graph_dtypes",
    "has_lazy_weights",
    "infer_shapes",
    "inferred_value_info",
    "inline_bytes",
    "input_dims",
    "is_lazy",
    "is_stripped",
    "iter_tensors",
    "largest_static_tensor",
    "lazy_as",
    "load_model",
    "model_sha256",
    "override_input_shapes",
    "parse_shape_spec",
    "parse_shape_values",
    "parse_shapes",
    "return_large_blocks",
    "save_model",
    "shapes_text",
    "spill",
    "spill_tensor",
    "structure_only",
    "summarize",
    "tensor_array",
    "tensor_nbytes",
    "value_dtypes",
    "value_shapes",
    "weight_bytes",
    "write_scratch",
]
