"""Weights spilled to this process's scratch folder: a model built in memory (an FP16
conversion of a large model) hands its large tensors to a data file there and keeps lazy
references to them (``external.make_lazy``'s kind), so that the stages after it (ONNX
Runtime sessions from scratch files, the final save, which streams them) never hold the
weights in memory again. The folder goes when the process exits."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from trtconv.load.external import LAZY_TENSOR_MIN, is_lazy, tensor_array
from trtconv.load.proto import inline_bytes, is_inline_weight, point_to_file, without_initializers

_FOLDER: list[Path] = []  # created on first use


def _scratch_file(stem: str) -> Path:
    if not _FOLDER:
        folder = Path(tempfile.mkdtemp(prefix="trtconv-spill-"))
        atexit.register(shutil.rmtree, folder, True)
        _FOLDER.append(folder)
    fd, name = tempfile.mkstemp(prefix=stem + "-", suffix=".data", dir=_FOLDER[0])
    os.close(fd)
    return Path(name)


def spill(model: onnx.ModelProto, min_bytes: int = LAZY_TENSOR_MIN) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph initializers of at least ``min_bytes`` held in
    memory are in a scratch data file instead; lazy ones stay references. Drop ``model``
    afterwards: its weights' memory goes with it (a protobuf frees its bytes only as a whole)."""
    path = _scratch_file("spill")
    out = without_initializers(model)
    with open(path, "wb") as fh:
        for t in model.graph.initializer:
            nt = out.graph.initializer.add()
            if not is_inline_weight(t, min_bytes):
                nt.CopyFrom(t)
                continue
            raw = inline_bytes(t)
            offset = fh.tell()
            fh.write(raw)
            point_to_file(t, nt, str(path), offset, len(raw))
            del raw
    return out


def spill_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    """``t`` (values in memory) written to a new scratch data file, as a lazy tensor of the
    same name, type and shape: a weight computed from weights on disk (a folded or quantized
    one) goes back there as soon as it is made, not once the whole model is done."""
    raw = inline_bytes(t)
    path = _scratch_file("made")
    path.write_bytes(raw)
    out = onnx.TensorProto()
    point_to_file(t, out, str(path), 0, len(raw))
    return out


def lazy_as(t: onnx.TensorProto, dtype: int) -> onnx.TensorProto:
    """A lazy tensor's values converted to ``dtype`` into a new scratch data file, as a lazy
    tensor of the same name: one tensor in memory at a time (an FP32 twin of FP16 weights)."""
    if not is_lazy(t):
        raise ValueError(f"tensor {t.name!r} is not on disk")
    arr = tensor_array(t).astype(helper.tensor_dtype_to_np_dtype(dtype))
    path = _scratch_file("as")
    raw = np.ascontiguousarray(arr).tobytes()
    path.write_bytes(raw)
    out = onnx.TensorProto()
    point_to_file(t, out, str(path), 0, len(raw))
    out.data_type = dtype
    return out
