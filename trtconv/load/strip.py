"""Loading for ``check``: the bytes of large embedded tensors dropped once their size is validated.

``check`` needs dims and dtypes only. onnx.checker and shape inference serialize the whole
proto, which for a model with embedded weights costs more than TensorRT's own parse; a
stripped tensor is marked external at ``STRIPPED_LOCATION`` (never read), as
``proto.structure_only`` marks the tensors of its copies.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from trtconv.load.proto import STRIPPED_LOCATION, element_bits
from trtconv.onnxutil import iter_graphs

FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                         onnx.TensorProto.DOUBLE})
STRIP_MIN_BYTES = 4096  # tensors this large never feed shape inference's data propagation


def strip_weights(model: onnx.ModelProto, min_bytes: int = STRIP_MIN_BYTES) -> int:
    """Drop the bytes of large embedded tensors for good, each one's byte count validated
    first (a wrong one is left for ``check_tensor_sizes`` to report). Returns how many."""
    count = 0
    for t in _strippable(model):
        if t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data"):
            continue
        have = len(t.raw_data)
        if have < min_bytes:
            continue
        n = 1
        for d in t.dims:
            n *= d
        bits = element_bits(t)
        if bits is not None and min(t.dims, default=0) >= 0 and have != (n * bits + 7) // 8:
            continue
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", STRIPPED_LOCATION), ("offset", "0"), ("length", str(have))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        count += 1
    return count


def _strippable(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Initializers, and float Constant values (an integer Constant may feed shape inference's
    data propagation, so it keeps its bytes)."""
    for g in iter_graphs(model.graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in FLOAT_TYPES:
                    yield attr.t


def is_stripped(t: onnx.TensorProto) -> bool:
    """Whether this tensor's bytes were dropped (here or in a ``structure_only`` copy)."""
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == STRIPPED_LOCATION for e in t.external_data)
