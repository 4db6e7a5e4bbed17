"""Read, check and save ONNX models, including external data and models over 2 GB.

A model over 2 GB cannot be one protobuf, so we never serialize it whole: the
checker and shape inference run on the *path*, and saving always writes weights
to an external-data file when the model is large. External-data locations come
from strangers' files, so they are validated before anything is opened.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, numpy_helper

from trtconv.errors import InvalidModelError, OutputError, UsageError
from trtconv.onnxutil.domains import default_opset, display_domain, is_default_domain, opset_versions
from trtconv.onnxutil.order import topological_order
from trtconv.onnxutil.walk import iter_graphs, subgraph_depth
from trtconv.outputs import atomic_dir, check_output_path, fsync_dir, os_error

PROTOBUF_LIMIT = 2**31 - 1
# Opset and IR versions are small numbers; anything past int32 is corruption, and
# onnx's C++ checker cannot even take it as an argument.
OPSET_LIMIT = 2**31 - 1
# Protobuf stops parsing near 30 levels; passes that walk subgraphs per level (calibration
# probes expose every inner tensor at every level) grow with the square of the depth.
MAX_SUBGRAPH_DEPTH = 16
# A graph input's dim beyond int32 cannot be fed (and TensorRT profiles take int32 shapes).
MAX_INPUT_DIM = 2**31 - 1
# IR 3 (ONNX 1.0) introduced opset imports; nothing reads older files any more.
MIN_IR_VERSION = 3
# Above this we save weights externally: comfortably below the protobuf limit.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


@dataclass(frozen=True)
class ExternalRef:
    tensor: str
    location: str
    offset: int
    length: int | None


@dataclass(frozen=True)
class LoadedModel:
    """An ONNX model with where it came from; ``proto`` may hold external data refs only."""

    proto: onnx.ModelProto
    path: Path
    weights_loaded: bool
    external_refs: tuple[ExternalRef, ...] = ()
    checker_error: str | None = None

    @property
    def opsets(self) -> dict[str, int]:
        return {display_domain(d): v for d, v in opset_versions(self.proto.opset_import).items()}

    @property
    def default_opset(self) -> int:
        return default_opset(self.proto)

    @property
    def external_files(self) -> tuple[Path, ...]:
        base = self.path.parent
        return tuple(sorted({(base / r.location) for r in self.external_refs}))


@dataclass(frozen=True)
class ModelSummary:
    ir_version: int
    opsets: dict[str, int]
    producer: str
    nodes: int
    initializers: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    external_files: tuple[str, ...] = field(default_factory=tuple)


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


def _external_refs(model: onnx.ModelProto) -> list[tuple[onnx.TensorProto, ExternalRef]]:
    refs = []
    for t in iter_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError as exc:
            raise InvalidModelError(
                f"tensor {t.name!r}: external-data offset/length is not a number",
                hint="the model file is corrupt; re-export it",
            ) from exc
        refs.append((t, ExternalRef(t.name, location, offset, length)))
    return refs


# Element widths of the sub-byte types (onnx packs them); the rest follow numpy's itemsize.
_SUB_BYTE_BITS = {
    onnx.TensorProto.UINT4: 4, onnx.TensorProto.INT4: 4, onnx.TensorProto.FLOAT4E2M1: 4,
    getattr(onnx.TensorProto, "UINT2", -1): 2, getattr(onnx.TensorProto, "INT2", -2): 2,
    getattr(onnx.TensorProto, "FLOAT6E2M3", -3): 6, getattr(onnx.TensorProto, "FLOAT6E3M2", -4): 6,
}


def _element_bits(t: onnx.TensorProto) -> int | None:
    if t.data_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[t.data_type]
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize) * 8
    except (KeyError, TypeError, ValueError):
        return None


def check_tensor_sizes(model: onnx.ModelProto, available: dict[str, int] | None = None) -> None:
    """Refuse tensors whose declared dims need more bytes than they carry.

    A 16-byte tensor declaring 2**40 elements must fail here, cheaply, rather than
    make shape inference or numpy try to materialize it. ``available`` maps an
    external tensor's name to the bytes its data file can supply.
    """
    available = available or {}
    for t in iter_tensors(model):
        label = t.name or "(unnamed constant)"
        if any(d < 0 for d in t.dims):
            raise InvalidModelError(f"tensor {label!r} has negative dims {list(t.dims)}",
                                    hint="the model file is corrupt; re-export it")
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type == onnx.TensorProto.STRING:
            if n > len(t.string_data):
                raise InvalidModelError(f"tensor {label!r} declares {n} strings but holds {len(t.string_data)}",
                                        hint="the model file is corrupt; re-export it")
            continue
        bits = _element_bits(t)
        if bits is None:
            raise InvalidModelError(f"tensor {label!r} has unknown data type {t.data_type}",
                                    hint="the model file is corrupt, or from a newer ONNX than this onnx package")
        need_bytes = (n * bits + 7) // 8
        if t.data_location == onnx.TensorProto.EXTERNAL:
            if t.name not in available:
                continue
            # onnx reads exactly `length` bytes (or up to the end of the file): numpy then
            # needs exactly the declared size
            ok, have = available[t.name] == need_bytes, available[t.name]
        elif t.HasField("raw_data"):
            ok, have = len(t.raw_data) == need_bytes, len(t.raw_data)
        else:
            entries = len(getattr(t, onnx.helper.tensor_dtype_to_field(t.data_type)))
            per_element = 2 if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
            # 2- and 4-bit values are packed a byte per int32 entry; 6-bit ones take an entry each
            ok = entries == (need_bytes if bits in (2, 4) else n * per_element)
            have = entries
        if not ok:
            raise InvalidModelError(
                f"tensor {label!r} declares {onnx.TensorProto.DataType.Name(t.data_type)} dims {list(t.dims)} "
                f"({need_bytes} bytes) but carries {have} {'bytes' if t.HasField('raw_data') or t.data_location else 'values'}",
                hint="the model file is corrupt or truncated; re-export it",
            )


_ATTRIBUTE_TYPES = {v for _, v in onnx.AttributeProto.AttributeType.items() if v}


def check_text(msg, where: str = "model") -> None:
    """Every text field must be UTF-8 (ONNX says so): a damaged name otherwise reaches
    Python as ``bytes`` and breaks whatever joins, formats or compares it later."""
    if isinstance(msg, onnx.TensorProto):  # never touch the (possibly huge) data fields
        fields = [("name", msg.name), ("doc_string", msg.doc_string)]
        fields += [(f"external_data[{i}]", e.key) for i, e in enumerate(msg.external_data)]
        fields += [(f"external_data[{i}]", e.value) for i, e in enumerate(msg.external_data)]
        for name, value in fields:
            if isinstance(value, bytes):
                raise _not_utf8(f"{where}.{name}")
        return
    for fd, value in msg.ListFields():
        if fd.type == fd.TYPE_STRING:
            for v in value if fd.is_repeated else [value]:
                if isinstance(v, bytes):
                    raise _not_utf8(f"{where}.{fd.name}")
        elif fd.type == fd.TYPE_MESSAGE:
            if fd.is_repeated:
                for i, item in enumerate(value):
                    check_text(item, f"{where}.{fd.name}[{i}]")
            else:
                check_text(value, f"{where}.{fd.name}")
        elif fd.type == fd.TYPE_BYTES and isinstance(msg, onnx.AttributeProto) and fd.name in ("s", "strings"):
            for v in value if fd.is_repeated else [value]:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    raise _not_utf8(f"{where}.{fd.name}") from None


def _not_utf8(where: str) -> InvalidModelError:
    return InvalidModelError(f"{where} is not valid UTF-8 text", hint="the model file is corrupt; re-export it")


# Attributes of standard ops that name an element type (Cast.to, EyeLike.dtype, ...).
_DTYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype"})
_KNOWN_DTYPES = frozenset(onnx.TensorProto.DataType.values())


@functools.lru_cache(maxsize=4096)
def _schema_attributes(op_type: str, opset: int) -> tuple[int, dict[str, int]] | None:
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:
        return None
    return schema.since_version, {name: int(a.type) for name, a in schema.attributes.items()}


def _check_attribute_schema(node: onnx.NodeProto, opsets: dict[str, int], label: str) -> None:
    """Standard ops' attributes must have the type their schema declares (a Conv ``strides``
    that is a string, an If branch that is not a graph): the checker's verdict is only
    advisory, but no later stage can make sense of such a node."""
    domain = node.domain or ""
    if not is_default_domain(domain) or not node.attribute:
        return
    found = _schema_attributes(node.op_type, opsets.get("", 0))
    if found is None:  # unknown op or opset: the analysis reports it
        return
    since, attributes = found
    for attr in node.attribute:
        if attr.name in _DTYPE_ATTRIBUTES and attr.type == onnx.AttributeProto.INT and (
            attr.i not in _KNOWN_DTYPES or (attr.i == 0 and node.op_type == "Cast")
        ):
            raise InvalidModelError(
                f"node {node.name or node.op_type!r} in {label}: attribute {attr.name!r} = {attr.i} "
                "is not an ONNX data type",
                hint="the model file is corrupt or badly edited; re-export it",
            )
        want = attributes.get(attr.name)
        if want is None:  # ONNX Runtime refuses these too ("Unrecognized attribute")
            raise InvalidModelError(
                f"node {node.name or node.op_type!r} in {label}: {node.op_type} (opset {since}) "
                f"has no attribute {attr.name!r}",
                hint="the model file is corrupt or badly edited; re-export it",
            )
        if want != attr.type:
            raise InvalidModelError(
                f"node {node.name or node.op_type!r} in {label}: attribute {attr.name!r} has type "
                f"{onnx.AttributeProto.AttributeType.Name(attr.type)}, {node.op_type} needs "
                f"{onnx.AttributeProto.AttributeType.Name(want)}",
                hint="the model file is corrupt or badly edited; re-export it",
            )


def check_structure(model: onnx.ModelProto) -> None:
    """Refuse what no consumer can make sense of, whatever the ops: typeless inputs,
    a tensor produced twice, cycles, attributes without a name or type.

    ``onnx.checker``'s verdict stays advisory (custom ops fail it legitimately); these
    rules hold for every ONNX graph, and downstream code relies on them.
    """
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.name:
            raise InvalidModelError("a graph input has no name", hint="the model file is corrupt; re-export it")
        kind = vi.type.WhichOneof("value")
        if kind is None:
            raise InvalidModelError(f"input {vi.name!r} has no type", hint="the model file is corrupt; re-export it")
        if kind == "tensor_type" and vi.type.tensor_type.elem_type not in onnx.TensorProto.DataType.values():
            raise InvalidModelError(f"input {vi.name!r} has unknown element type {vi.type.tensor_type.elem_type}",
                                    hint="the model file is corrupt; re-export it")
        if kind == "tensor_type" and vi.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            raise InvalidModelError(f"input {vi.name!r} has no element type",
                                    hint="the model file is corrupt; re-export it")
        if kind == "tensor_type":
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value > MAX_INPUT_DIM:
                    raise InvalidModelError(
                        f"input {vi.name!r} declares a dim of {d.dim_value}; no input that large can be fed",
                        hint="the model file is corrupt; re-export it")
    opsets = opset_versions(model.opset_import)
    depth = subgraph_depth(model.graph)
    if depth > MAX_SUBGRAPH_DEPTH:
        raise InvalidModelError(
            f"subgraphs (If/Loop/Scan bodies) nest {depth} levels deep; trtconv handles up to {MAX_SUBGRAPH_DEPTH}",
            hint="real models nest a few levels; this file is probably corrupt or machine-generated",
        )
    for g in iter_graphs(model.graph):
        _check_graph(g, opsets)


def _check_graph(g: onnx.GraphProto, opsets: dict[str, int]) -> None:
    label = f"graph {g.name!r}" if g.name else "the graph"
    known_types = set(onnx.TensorProto.DataType.values())
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type not in known_types:
            raise InvalidModelError(f"tensor {vi.name!r} in {label} has unknown element type "
                                    f"{vi.type.tensor_type.elem_type}", hint="the model file is corrupt; re-export it")
    for kind, names in (("initializer", [t.name for t in g.initializer]), ("input", [vi.name for vi in g.input])):
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidModelError(f"{label} has two {kind}s named {dup!r} (names must be unique)",
                                    hint="the ONNX graph is structurally broken; re-export the model")
    sources = {t.name for t in g.initializer} | {vi.name for vi in g.input}
    producer: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for attr in node.attribute:
            if not attr.name or attr.type not in _ATTRIBUTE_TYPES:
                raise InvalidModelError(
                    f"node {node.name or node.op_type!r} in {label} has an attribute "
                    f"{attr.name!r} of invalid type {attr.type}",
                    hint="the model file is corrupt; re-export it",
                )
        _check_attribute_schema(node, opsets, label)
        for out in node.output:
            if not out:
                continue  # an omitted optional output
            if out in producer or out in sources:
                raise InvalidModelError(
                    f"invalid graph: node {node.name or node.op_type!r} in {label} produces tensor {out!r}, "
                    "which already exists (names must be unique)",
                    hint="the ONNX graph is structurally broken; re-export the model",
                )
            producer[out] = i
    _, cyclic = topological_order(g)
    if cyclic is not None:
        stuck = g.node[cyclic]
        raise InvalidModelError(
            f"invalid graph: node {stuck.name or stuck.op_type!r} in {label} is part of a cycle",
            hint="the ONNX graph is structurally broken; re-export the model",
        )


def validate_external_refs(refs: list[ExternalRef], base_dir: Path) -> None:
    """Refuse locations outside the model's folder and refs past the end of their file."""
    base = base_dir.resolve()
    sizes: dict[Path, int] = {}
    for ref in refs:
        loc = ref.location
        if not loc:
            raise InvalidModelError(f"tensor {ref.tensor!r} has external data but no location")
        if os.path.isabs(loc) or ".." in Path(loc).parts or "\\" in loc:
            raise InvalidModelError(
                f"tensor {ref.tensor!r}: external-data location {loc!r} escapes the model's folder",
                hint="external data must sit in the model's folder; trtconv refuses other paths",
            )
        if "\x00" in loc:
            raise InvalidModelError(f"tensor {ref.tensor!r}: external-data location {loc!r} holds a NUL byte",
                                    hint="the model file is corrupt; re-export it")
        try:
            target = (base / loc).resolve()
        except (OSError, RuntimeError) as exc:  # name too long, symlink loop
            raise InvalidModelError(
                f"tensor {ref.tensor!r}: external-data location {loc!r} cannot be resolved "
                f"({getattr(exc, 'strerror', None) or exc})"
            ) from exc
        if base not in target.parents:
            raise InvalidModelError(
                f"tensor {ref.tensor!r}: external-data location {loc!r} resolves outside the model's folder "
                "(symbolic link?)",
                hint="copy the data file into the model's folder",
            )
        if target not in sizes:
            try:
                is_file = target.is_file()
                size = target.stat().st_size if is_file else 0
            except OSError as exc:  # name too long, permission denied
                raise InvalidModelError(
                    f"tensor {ref.tensor!r}: cannot read external-data file {loc!r} "
                    f"({exc.strerror or exc})"
                ) from exc
            if not is_file:
                raise InvalidModelError(
                    f"external-data file {loc!r} (tensor {ref.tensor!r}) not found next to the model",
                    hint=f"copy {loc} into {base_dir}",
                )
            sizes[target] = size
        size = sizes[target]
        if ref.offset < 0 or (ref.length is not None and ref.length < 0):
            raise InvalidModelError(f"tensor {ref.tensor!r}: negative external-data offset or length")
        end = ref.offset + (ref.length or 0)
        if ref.offset > size or end > size:
            raise InvalidModelError(
                f"tensor {ref.tensor!r}: external data [{ref.offset}, {end}) lies past the end of "
                f"{loc!r} ({size} bytes)",
                hint="the data file is truncated or belongs to another model",
            )


def _external_bytes(refs: list[ExternalRef], base_dir: Path) -> dict[str, int]:
    """Bytes each external tensor can read: its length, else up to the end of its file."""
    out: dict[str, int] = {}
    for r in refs:
        if r.length is not None:
            out[r.tensor] = r.length
        else:
            out[r.tensor] = max(0, (base_dir / r.location).stat().st_size - r.offset)
    return out


def _read_proto(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not an ONNX file")
    if not path.is_file():  # a FIFO would block forever, /dev/zero would fill memory
        raise UsageError(f"{path} is not a regular file", hint="give the path of an .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise InvalidModelError(
            f"{path} is not a readable ONNX model ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'decode failed'})",
            hint="the file may be truncated or not ONNX at all; re-export or re-download it",
        ) from exc
    except OSError as exc:
        raise InvalidModelError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if model.ir_version <= 0 or not model.HasField("graph") or (
        not model.graph.node and not model.graph.output
    ):
        raise InvalidModelError(
            f"{path} is not an ONNX model (no IR version or empty graph)",
            hint="check that the file is an .onnx export, not another format",
        )
    if not model.opset_import:
        raise InvalidModelError(f"{path} imports no opset, so its ops have no meaning",
                                hint="the model file is corrupt; re-export it")
    for o in model.opset_import:
        if not 0 <= o.version <= OPSET_LIMIT:
            raise InvalidModelError(
                f"{path} imports opset {o.version} of domain {display_domain(o.domain)!r}, which cannot exist",
                hint="the model file is corrupt; re-export it",
            )
    if model.ir_version > OPSET_LIMIT:
        raise InvalidModelError(f"{path} declares IR version {model.ir_version}, which cannot exist",
                                hint="the model file is corrupt; re-export it")
    if model.ir_version < MIN_IR_VERSION:
        raise InvalidModelError(
            f"{path} declares IR version {model.ir_version}; ONNX Runtime and TensorRT need {MIN_IR_VERSION} or later",
            hint="re-export the model with a current exporter",
        )
    if not model.graph.output:
        raise InvalidModelError(f"{path}: the graph has no outputs, so there is nothing to convert",
                                hint="the model file is corrupt or badly edited; re-export it")
    return model


def _checker_error(model: onnx.ModelProto, path: Path, has_external: bool) -> str | None:
    """onnx.checker's complaint, if any. Kept as data: custom-domain ops fail it legitimately."""
    try:
        if has_external or model.ByteSize() > PROTOBUF_LIMIT:
            onnx.checker.check_model(str(path))
        else:
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    except Exception as exc:  # the checker can raise plain errors on malformed protos
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def load_model(path: str | os.PathLike[str], *, load_weights: bool = True, check: bool = True) -> LoadedModel:
    """Read ``path``; validate external data; optionally load it into the proto.

    ``load_weights=False`` keeps external tensors as references: analysis needs only
    the structure, and a 10 GB model then costs no more memory than its graph.
    """
    path = Path(path)
    model = _read_proto(path)
    check_text(model)
    pairs = _external_refs(model)
    refs = [r for _, r in pairs]
    validate_external_refs(refs, path.parent)
    check_tensor_sizes(model, _external_bytes(refs, path.parent))
    check_structure(model)
    err = _checker_error(model, path, bool(refs)) if check else None
    if load_weights and refs:
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError) as exc:
            raise InvalidModelError(f"cannot load external data of {path}: {exc}") from exc
    return LoadedModel(model, path, load_weights or not refs, tuple(refs), err)


def summarize(loaded: LoadedModel) -> ModelSummary:
    g = loaded.proto.graph
    init_names = {i.name for i in g.initializer}
    producer = " ".join(x for x in (loaded.proto.producer_name, loaded.proto.producer_version) if x)
    return ModelSummary(
        ir_version=loaded.proto.ir_version,
        opsets=loaded.opsets,
        producer=producer,
        nodes=sum(len(sg.node) for sg in iter_graphs(g)),
        initializers=len(g.initializer),
        inputs=tuple(i.name for i in g.input if i.name not in init_names),
        outputs=tuple(o.name for o in g.output),
        external_files=tuple(sorted({r.location for r in loaded.external_refs})),
    )


def file_sha256(path: Path, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def model_sha256(loaded: LoadedModel) -> str:
    """Hash of the model file and its external-data files, in a stable order."""
    h = hashlib.sha256()
    for p in (loaded.path, *loaded.external_files):
        h.update(p.name.encode())
        h.update(file_sha256(p).encode())
    return h.hexdigest()


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
    if external_data is None:
        external_data = _approx_size(model) > EXTERNAL_DATA_THRESHOLD
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
        except ValueError as exc:  # onnx refuses a >2 GB proto when told to keep weights inline
            raise OutputError(f"cannot write {path}: {str(exc).splitlines()[0] if str(exc) else exc}",
                              hint="large models need external data") from exc
    return path


EXTERNAL_TENSOR_MIN = 1024  # smaller tensors stay inline (shapes, scalars)
_DATA_FIELDS = frozenset({"raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                          "external_data", "data_location"})


def _tensor_nbytes(t: onnx.TensorProto) -> int:
    return len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (
        len(t.int64_data) + len(t.double_data) + len(t.uint64_data))


def _streamable(model: onnx.ModelProto) -> bool:
    """True when the weights sit in main-graph initializers (the usual case, and the only
    one where a copy of the model would matter): those are streamed out one by one."""
    everywhere = sum(_tensor_nbytes(t) for t in iter_tensors(model))
    initializers = sum(_tensor_nbytes(t) for t in model.graph.initializer)
    return everywhere - initializers < 64 * 2**20


def _copy_fields(src, dst, skip: frozenset[str] = frozenset()) -> None:
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def _save_streaming(model: onnx.ModelProto, model_path: Path, data_path: Path) -> None:
    """Write the initializers' bytes to ``data_path`` one tensor at a time and a slim
    copy of the model (everything but those bytes) to ``model_path``.

    onnx's own saver edits the proto it is given, so it needs a full copy of the
    model: twice the weights in memory, which a 10 GB model may not have room for.
    """

    slim = onnx.ModelProto()
    _copy_fields(model, slim, frozenset({"graph"}))
    _copy_fields(model.graph, slim.graph, frozenset({"initializer"}))
    with open(data_path, "wb") as fh:
        for t in model.graph.initializer:
            nt = slim.graph.initializer.add()
            big = (t.data_location != onnx.TensorProto.EXTERNAL and t.data_type != onnx.TensorProto.STRING
                   and _tensor_nbytes(t) >= EXTERNAL_TENSOR_MIN)
            if not big:
                nt.CopyFrom(t)
                continue
            _copy_fields(t, nt, _DATA_FIELDS)
            raw = t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()
            offset = fh.tell()
            fh.write(raw)
            nt.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", data_path.name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = nt.external_data.add()
                entry.key, entry.value = key, value
            del raw
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


def _approx_size(model: onnx.ModelProto) -> int:
    total = 0
    for t in iter_tensors(model):
        total += len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (
            len(t.int64_data) + len(t.double_data)
        )
    return total
