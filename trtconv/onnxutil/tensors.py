"""Tensors left on disk: an external tensor whose location is an absolute path (what
``load_model(lazy_from=...)`` and ``load/spill.py`` make) is read from its file when its
values are asked for. Here, below every pass that reads constants, because onnx's own
reader refuses absolute locations."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper


def is_lazy(t: onnx.TensorProto) -> bool:
    """An external tensor pointing at its data file by absolute path."""
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return False
    return any(e.key == "location" and os.path.isabs(e.value) for e in t.external_data)


def has_lazy_weights(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s weights were left on disk (``load_model(lazy_from=...)``): then its
    stages read each where they use it, and ONNX Runtime must get it through a scratch file."""
    return any(is_lazy(t) for t in model.graph.initializer)


def lazy_span(t: onnx.TensorProto) -> tuple[str, int, int]:
    """(file, offset, length) of a lazy tensor's bytes."""
    info = {e.key: e.value for e in t.external_data}
    offset = int(info.get("offset") or 0)
    length = int(info["length"]) if info.get("length") else os.stat(info["location"]).st_size - offset
    return info["location"], offset, length


def read_span(t: onnx.TensorProto) -> bytes:
    """A lazy tensor's bytes."""
    location, offset, length = lazy_span(t)
    with open(location, "rb") as fh:
        fh.seek(offset)
        return fh.read(length)


def tensor_array(t: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array`` that also reads lazy tensors."""
    if not is_lazy(t):
        return numpy_helper.to_array(t)
    loaded = onnx.TensorProto()
    loaded.CopyFrom(t)  # a stub: dims, type and name, no bytes
    del loaded.external_data[:]
    loaded.data_location = onnx.TensorProto.DEFAULT
    loaded.raw_data = read_span(t)
    return numpy_helper.to_array(loaded)
