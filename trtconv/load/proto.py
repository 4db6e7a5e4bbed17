"""Walking and sizing a ModelProto: every graph, every tensor that may hold data, and
how many bytes the weights take (a protobuf cannot exceed 2 GB)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

PROTOBUF_LIMIT = 2**31 - 1


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_graphs(g)


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto that may carry data: initializers and tensor attributes, in subgraphs too."""
    for g in iter_graphs(model.graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors



def tensor_nbytes(t: onnx.TensorProto) -> int:
    """Bytes of data a tensor holds inline (external tensors hold none here)."""
    return len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (
        len(t.int64_data) + len(t.double_data) + len(t.uint64_data))


def approx_size(model: onnx.ModelProto) -> int:
    """Bytes of inline tensor data in the whole model: what decides whether it fits one protobuf."""
    return sum(tensor_nbytes(t) for t in iter_tensors(model))
