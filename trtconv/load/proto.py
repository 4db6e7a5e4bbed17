"""Walking and sizing a ModelProto: every graph, every tensor that may hold data, and
how many bytes the weights take (a protobuf cannot exceed 2 GB)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import numpy_helper

from trtconv.onnxutil import is_lazy, iter_graphs

PROTOBUF_LIMIT = 2**31 - 1


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



# Element widths of the sub-byte types (onnx packs them); the rest follow numpy's itemsize.
_SUB_BYTE_BITS = {
    onnx.TensorProto.UINT4: 4, onnx.TensorProto.INT4: 4, onnx.TensorProto.FLOAT4E2M1: 4,
    getattr(onnx.TensorProto, "UINT2", -1): 2, getattr(onnx.TensorProto, "INT2", -2): 2,
    getattr(onnx.TensorProto, "FLOAT6E2M3", -3): 6, getattr(onnx.TensorProto, "FLOAT6E3M2", -4): 6,
}


def element_bits(t: onnx.TensorProto) -> int | None:
    if t.data_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[t.data_type]
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize) * 8
    except (KeyError, TypeError, ValueError):
        return None


def tensor_nbytes(t: onnx.TensorProto) -> int:
    """Bytes of data a tensor holds inline (external tensors hold none here). ``raw_data`` is sized from
    the dims and the type, never read: reading it copies the bytes (0.2 s for 92 MB), and loading
    checked that it holds exactly that many (``validate.check_tensor_sizes``)."""
    if t.HasField("raw_data"):
        bits = element_bits(t)
        if bits is not None:
            n = 1
            for d in t.dims:
                n *= d
            return (n * bits + 7) // 8
        return len(t.raw_data)
    return 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (
        len(t.int64_data) + len(t.double_data) + len(t.uint64_data))


def approx_size(model: onnx.ModelProto) -> int:
    """Bytes of inline tensor data in the whole model: what decides whether it fits one protobuf."""
    return sum(tensor_nbytes(t) for t in iter_tensors(model))


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of all tensor data, inline and external with a known length: the model's weights."""
    total = 0
    for t in iter_tensors(model):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += next((int(e.value) for e in t.external_data if e.key == "length" and e.value.isdigit()), 0)
        else:
            total += tensor_nbytes(t)
    return total


# Tensors at least this large lose their bytes in ``structure_only``; smaller ones (shapes,
# axes, scalars) keep them, so shape inference can still propagate constant values.
STRUCTURE_KEEP_BYTES = 1024
STRIPPED_LOCATION = "trtconv-structure-only"


def structure_only(model: onnx.ModelProto, keep_bytes: int = STRUCTURE_KEEP_BYTES) -> onnx.ModelProto:
    """A copy of ``model`` without the bytes of its large tensors (main-graph initializers and
    Constant values), which become external-data references to a file that does not exist
    (so do tensors left on disk by ``load_model(lazy_from=...)``).

    Shape inference needs dims and types, not weights: handing it the whole model costs a
    serialized copy, a parsed copy and a returned copy of every weight (seconds and several
    times the model's size). The weights are never copied here: the copy is built field by field.
    ``keep_bytes``: tensors smaller than this keep their bytes.
    """
    out = onnx.ModelProto()
    copy_fields(model, out, frozenset({"graph"}))
    copy_fields(model.graph, out.graph, frozenset({"initializer", "node"}))
    for t in model.graph.initializer:
        _stub_tensor(t, out.graph.initializer.add(), keep_bytes)
    for n in model.graph.node:
        nn = out.graph.node.add()
        copy_fields(n, nn, frozenset({"attribute"}))
        for a in n.attribute:
            na = nn.attribute.add()
            if a.type == onnx.AttributeProto.TENSOR:
                copy_fields(a, na, frozenset({"t"}))
                _stub_tensor(a.t, na.t, keep_bytes)
            else:
                na.CopyFrom(a)
    return out


def _stub_tensor(t: onnx.TensorProto, out: onnx.TensorProto, keep_bytes: int = STRUCTURE_KEEP_BYTES) -> None:
    on_disk = t.data_location == onnx.TensorProto.EXTERNAL
    if (on_disk and not is_lazy(t)) or (not on_disk and tensor_nbytes(t) < keep_bytes):
        out.CopyFrom(t)
        return
    copy_fields(t, out, DATA_FIELDS)
    out.data_location = onnx.TensorProto.EXTERNAL
    entry = out.external_data.add()
    entry.key, entry.value = "location", STRIPPED_LOCATION


DATA_FIELDS = frozenset({"raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                          "string_data", "external_data", "data_location"})


def without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with no main-graph initializers, for a writer that adds them back
    one at a time (pointing into a data file); nothing large is copied."""
    out = onnx.ModelProto()
    copy_fields(model, out, frozenset({"graph"}))
    copy_fields(model.graph, out.graph, frozenset({"initializer"}))
    return out


def is_inline_weight(t: onnx.TensorProto, min_bytes: int) -> bool:
    """Whether ``t`` holds at least ``min_bytes`` of numeric data in memory (the tensors a
    writer moves into a data file)."""
    return (t.data_location != onnx.TensorProto.EXTERNAL and t.data_type != onnx.TensorProto.STRING
            and tensor_nbytes(t) >= min_bytes)


def inline_bytes(t: onnx.TensorProto) -> bytes:
    """The bytes a data file holds for in-memory tensor ``t`` (ONNX's raw layout)."""
    return t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()


def point_to_file(src: onnx.TensorProto, out: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Make ``out`` the external-data tensor ``src`` is, its bytes at ``location``[offset:offset+length]."""
    copy_fields(src, out, DATA_FIELDS)
    out.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = out.external_data.add()
        entry.key, entry.value = key, value


def copy_fields(src, dst, skip: frozenset[str] = frozenset()) -> None:
    """Copy a message's set fields except ``skip`` (so big fields are never copied, nor read: ``ListFields`` would
    hand over every set field's value, a tensor's bytes included, a copy each time)."""
    for fd in src.DESCRIPTOR.fields:
        if fd.name in skip:
            continue
        if fd.is_repeated:
            value = getattr(src, fd.name)
            if len(value):
                getattr(dst, fd.name).extend(value)
        elif not src.HasField(fd.name):
            continue
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(getattr(src, fd.name))
        else:
            setattr(dst, fd.name, getattr(src, fd.name))


def inferred_value_info(model: onnx.ModelProto) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """Main-graph (value infos, outputs) as ONNX shape inference (with data propagation) finds
    them, run on ``structure_only(model)``; the model's own when inference fails (custom ops:
    unknown stays unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(structure_only(model), data_prop=True)
    except Exception:
        return [], list(model.graph.output)
    return list(inferred.graph.value_info), list(inferred.graph.output)
