"""ONNX helpers every stage shares, written once: walking subgraphs, topological order,
fresh names, domain names, the graph view and clean-up of passes that edit protos.

The bottom layer above ``errors``: plain functions over ``onnx`` protos (and
onnx-graphsurgeon graphs where a stage edits with it), no trtconv stage imported.
"""

from trtconv.onnxutil.dequantize import dequantized, per_axis
from trtconv.onnxutil.domains import (
    DEFAULT_DOMAIN,
    ORT_DOMAINS,
    default_opset,
    display_domain,
    is_default_domain,
    normalize_domain,
    opset_versions,
    qualified_op,
)
from trtconv.onnxutil.graph import (
    GraphView,
    Site,
    cleanup,
    constant_tensor,
)
from trtconv.onnxutil.indices import index_limits, integer_values, length_inputs, shape_value_inputs
from trtconv.onnxutil.names import (
    fresh_name,
    model_names,
)
from trtconv.onnxutil.order import (
    is_sorted,
    sort_nodes,
    topological_order,
)
from trtconv.onnxutil.tensors import (
    has_lazy_weights,
    is_lazy,
    lazy_span,
    read_span,
    tensor_array,
)
from trtconv.onnxutil.walk import (
    gs_all_subgraphs,
    gs_nodes,
    has_subgraphs,
    iter_graphs,
    iter_graphs_with_path,
    subgraph_depth,
    subgraphs,
)

__all__ = [
    "DEFAULT_DOMAIN",
    "ORT_DOMAINS",
    "GraphView",
    "Site",
    "cleanup",
    "constant_tensor",
    "default_opset",
    "dequantized",
    "display_domain",
    "fresh_name",
    "gs_all_subgraphs",
    "gs_nodes",
    "has_lazy_weights",
    "index_limits",
    "integer_values",
    "length_inputs",
    "shape_value_inputs",
    "has_subgraphs",
    "is_default_domain",
    "is_lazy",
    "is_sorted",
    "iter_graphs",
    "iter_graphs_with_path",
    "lazy_span",
    "model_names",
    "normalize_domain",
    "opset_versions",
    "per_axis",
    "qualified_op",
    "read_span",
    "sort_nodes",
    "subgraph_depth",
    "subgraphs",
    "tensor_array",
    "topological_order",
]
