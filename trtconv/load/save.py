"""Saving a model atomically; weights go to an external-data file when large, streamed
tensor by tensor so that a model is never held twice."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import EncodeError
from onnx import numpy_helper

from trtconv.errors import OutOfMemoryError, OutputError
from trtconv.load.external import copy_lazy, has_lazy_weights, is_lazy
from trtconv.load.proto import (
    approx_size,
    inline_bytes,
    is_inline_weight,
    iter_tensors,
    point_to_file,
    tensor_nbytes,
    without_initializers,
)
from trtconv.outputs import atomic_dir, check_output_path, fsync_dir, os_error

# Above this we save weights externally: comfortably below the protobuf limit.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    *,
    force: bool = False,
    external_data: bool | None = None,
) -> Path:
    """Write ``model`` atomically; weights go to ``<name>.data`` beside it when large.

    ``external_data=None`` decides by size. Both files are written in a scratch folder
    in the destination and renamed into place, data first, so a reader never sees an
    ``.onnx`` whose data file is missing or half-written.
    """
    path = Path(path)
    check_output_path(path, force=force)
    lazy = has_lazy_weights(model)
    if external_data is None or lazy:  # lazy weights are streamed from their file: always external
        external_data = lazy or approx_size(model) > EXTERNAL_DATA_THRESHOLD
    data_name = path.name + ".data"
    parent = path.parent if str(path.parent) else Path(".")
    if external_data:
        check_output_path(parent / data_name, force=force)  # its data file is an output too
    with atomic_dir(parent) as scratch:
        tmp_model = scratch / path.name
        try:
            if external_data and _streamable(model):
                _save_streaming(model, tmp_model, scratch / data_name)
            elif external_data:
                model = _with_raw_data(model)  # also a copy: onnx's saver edits the proto it is given
                onnx.save_model(
                    model,
                    str(tmp_model),
                    save_as_external_data=True,
                    all_tensors_to_one_file=True,
                    location=data_name,
                    size_threshold=EXTERNAL_TENSOR_MIN,
                )
            else:
                onnx.save_model(model, str(tmp_model))
            written = [f for f in (scratch / data_name, tmp_model) if f.exists()]
            for f in written:
                with open(f, "rb+") as fh:
                    os.fsync(fh.fileno())
            if len(written) == 2 and path.exists():
                # The old model must not meet the new data file: if we are killed between
                # the two renames below, leave no model rather than a mismatched pair.
                path.unlink()
            for f in written:
                os.replace(f, parent / f.name)
            fsync_dir(parent)
        except OSError as exc:
            raise os_error(path, exc) from exc
        except EncodeError as exc:  # a proto under 2 GB that cannot be serialized: the copy did not fit
            raise OutOfMemoryError("out of memory while writing the output") from exc
        except ValueError as exc:  # onnx refuses a >2 GB proto when told to keep weights inline
            raise OutputError(f"cannot write {path}: {str(exc).splitlines()[0] if str(exc) else exc}",
                              hint="large models need external data") from exc
    return path


EXTERNAL_TENSOR_MIN = 1024  # smaller tensors stay inline (shapes, scalars)


def write_scratch(model: onnx.ModelProto, path: Path) -> bool:
    """Write ``model`` to ``path`` with its initializers' bytes streamed into ``path.data``,
    for a reader in this process (no atomic rename, no fsync: a scratch copy). Returns False,
    writing nothing, when most weights are not main-graph initializers (they would stay inline)."""
    if not _streamable(model):
        return False
    _save_streaming(model, path, path.with_name(path.name + ".data"))
    return True


def _streamable(model: onnx.ModelProto) -> bool:
    """True when the weights sit in main-graph initializers (the usual case, and the only
    one where a copy of the model would matter): those are streamed out one by one."""
    everywhere = sum(tensor_nbytes(t) for t in iter_tensors(model))
    initializers = sum(tensor_nbytes(t) for t in model.graph.initializer)
    return everywhere - initializers < 64 * 2**20


def _save_streaming(model: onnx.ModelProto, model_path: Path, data_path: Path) -> None:
    """Write the initializers' bytes to ``data_path`` one tensor at a time and a slim
    copy of the model (everything but those bytes) to ``model_path``. Lazy tensors
    (``external.make_lazy``) are copied from their file, never loaded whole.

    onnx's own saver edits the proto it is given, so it needs a full copy of the
    model: twice the weights in memory, which a 10 GB model may not have room for.
    """

    slim = without_initializers(model)
    with open(data_path, "wb") as fh:
        for t in model.graph.initializer:
            nt = slim.graph.initializer.add()
            if is_lazy(t):  # still in the input's data file: copied over a block at a time
                offset = fh.tell()
                point_to_file(t, nt, data_path.name, offset, copy_lazy(t, fh))
            elif is_inline_weight(t, EXTERNAL_TENSOR_MIN):
                raw = inline_bytes(t)
                offset = fh.tell()
                fh.write(raw)
                point_to_file(t, nt, data_path.name, offset, len(raw))
                del raw
            else:
                nt.CopyFrom(t)
    model_path.write_bytes(slim.SerializeToString())


def _with_raw_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose tensors keep their bytes in ``raw_data``: onnx externalizes only those."""

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in iter_tensors(out):
        if t.data_location == onnx.TensorProto.EXTERNAL or t.HasField("raw_data"):
            continue
        if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            continue
        arr = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return out


