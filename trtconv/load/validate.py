"""Structural checks on a model read from a stranger's file, run before anything trusts it:
text is UTF-8, declared sizes match the data (and never drive allocation), names are
unique, the graph is acyclic and shallow, attributes fit their op's schema."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import onnx

from trtconv.errors import InvalidModelError
from trtconv.load.proto import PROTOBUF_LIMIT, STRIPPED_LOCATION, element_bits, iter_tensors, structure_only
from trtconv.onnxutil import is_default_domain, iter_graphs, opset_versions, subgraph_depth, topological_order

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
        bits = element_bits(t)
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


def checker_error(model: onnx.ModelProto, path: Path, has_external: bool) -> str | None:
    """onnx.checker's complaint, if any. Kept as data: custom-domain ops fail it legitimately.
    Without external data it checks the structure alone (it checks structure, not values)."""
    try:
        if has_external:
            onnx.checker.check_model(str(path))
        else:
            check_structure_only(model, path)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return _one_line(str(exc)) or type(exc).__name__
    except Exception as exc:  # the checker can raise plain errors on malformed protos
        return _one_line(f"{type(exc).__name__}: {exc}")
    return None


def _one_line(message: str, limit: int = 400) -> str:
    """The checker's message on one line: it names a node over several ("of node: \\nname: n
    OpType: Relu\\n is not ..."), so the first line alone stops mid-sentence; its context block goes."""
    text = " ".join(message.split("==> Context:")[0].split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_structure_only(model: onnx.ModelProto, path: Path | None) -> None:
    """onnx.checker on the model's structure: a ``structure_only`` copy (kilobytes for most
    models) beside an empty file at the stripped tensors' location, which the checker wants
    to exist. Falls back to the file on disk (if any) when even the structure is over 2 GB."""
    data = structure_only(model).SerializeToString()
    if len(data) > PROTOBUF_LIMIT:
        if path is not None:
            onnx.checker.check_model(str(path))
        return
    with tempfile.TemporaryDirectory(prefix="trtconv-check-") as tmp:
        (Path(tmp) / STRIPPED_LOCATION).write_bytes(b"")
        (Path(tmp) / "model.onnx").write_bytes(data)
        onnx.checker.check_model(str(Path(tmp) / "model.onnx"))
