"""Which outputs are class scores, and along which axis their classes lie (for top-1 agreement).

A Softmax's classes are along its ``axis``, not always the last one: MTCNN's PNet ends in a softmax over
axis 1 of an NCHW map (face / not a face at each location), where an argmax over the last axis compares
positions along the width, which is no agreement of anything (it read 0.50 on a model whose classes
agreed everywhere). An output ``[N, C]`` is taken as classes along its last axis.
"""

from __future__ import annotations

import onnx

from trtconv.onnxutil import GraphView

SOFTMAXES = ("Softmax", "LogSoftmax")
# ops between a softmax and the output through which its last axis is taken to stay the last (a Transpose
# moves it; a Reshape that regroups the last axis is not told apart)
KEEPS_LAST_AXIS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def class_axes(model: onnx.ModelProto) -> dict[str, int]:
    """Output name -> the axis of its classes, for the outputs that look like class scores."""
    view = GraphView(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    shapes = {v.name: v for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    out: dict[str, int] = {}
    for vi in model.graph.output:
        axis = _softmax_axis(view, vi.name, opset, shapes)
        if axis is not None:
            out[vi.name] = axis
            continue
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value > 1:
            out[vi.name] = -1
    return out


def _rank(shapes: dict[str, onnx.ValueInfoProto], name: str) -> int | None:
    vi = shapes.get(name)
    return len(vi.type.tensor_type.shape.dim) if vi is not None and vi.type.tensor_type.HasField("shape") else None


def _softmax_axis(view: GraphView, name: str, opset: int, shapes: dict[str, onnx.ValueInfoProto]) -> int | None:
    """The class axis of output ``name`` if a softmax computes it (directly: its axis; through KEEPS_LAST_AXIS ops:
    -1 when the softmax's axis was its last); None otherwise or when that cannot be told."""
    site = view.producer_through(name, through=KEEPS_LAST_AXIS)
    if site is None or site.node.op_type not in SOFTMAXES:
        return None
    node = site.node
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1 if opset >= 13 else 1)
    rank = _rank(shapes, node.output[0]) or _rank(shapes, node.input[0])
    if axis == -1 or (rank is not None and axis == rank - 1):
        return -1
    if opset < 13 or name not in node.output:
        return None  # before opset 13 the classes are every axis from ``axis`` on, flattened; behind a reshape, unknown
    if axis >= 0:
        return axis
    return None if rank is None else axis + rank
