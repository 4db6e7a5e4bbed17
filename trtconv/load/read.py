"""Reading a model: the file, its external data (validated first, loaded only on request),
the structural checks, and what the model is (summary, content hash)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from trtconv.errors import InvalidModelError, UsageError
from trtconv.load.external import (
    LAZY_WEIGHTS_BYTES,
    ExternalRef,
    external_bytes,
    external_refs,
    make_lazy,
    validate_external_refs,
)
from trtconv.load.memory import ensure_room
from trtconv.load.proto import STRIPPED_LOCATION
from trtconv.load.strip import strip_weights
from trtconv.load.validate import (
    MIN_IR_VERSION,
    OPSET_LIMIT,
    check_structure,
    check_tensor_sizes,
    check_text,
    checker_error,
)
from trtconv.onnxutil import default_opset, display_domain, iter_graphs, opset_versions


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


def read_proto(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not an ONNX file")
    if not path.is_file():  # a FIFO would block forever, /dev/zero would fill memory
        raise UsageError(f"{path} is not a regular file", hint="give the path of an .onnx file")
    ensure_room(path.stat().st_size, "reading the model")
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


def load_model(path: str | os.PathLike[str], *, load_weights: bool = True, check: bool = True,
               structure_only: bool = False, lazy_from: int | None = None) -> LoadedModel:
    """Read ``path``; validate external data; optionally load it into the proto.

    ``load_weights=False`` keeps external tensors as references: analysis needs only
    the structure, and a 10 GB model then costs no more memory than its graph.
    ``structure_only=True`` (implies no weights) also drops the bytes of large embedded
    tensors after validating their size (``strip.strip_weights``): what ``check`` reads.
    """
    path = Path(path)
    model = read_proto(path)
    check_text(model)
    if structure_only:
        load_weights = False
        strip_weights(model)
    pairs = [(t, r) for t, r in external_refs(model) if r.location != STRIPPED_LOCATION]
    refs = [r for _, r in pairs]
    validate_external_refs(refs, path.parent)
    sizes = external_bytes(refs, path.parent)
    check_tensor_sizes(model, sizes)
    check_structure(model)
    err = checker_error(model, path, bool(refs)) if check else None
    on_disk_initializers = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if (load_weights and refs and lazy_from is not None and on_disk_initializers == len(pairs)
            and sum(sizes.values()) >= lazy_from):
        make_lazy(pairs, path.parent)
    elif load_weights and refs:
        ensure_room(sum(sizes.values()), "reading the model's external data")
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
    return files_sha256((p.name, file_sha256(p)) for p in (loaded.path, *loaded.external_files))


def files_sha256(files: Iterable[tuple[str, str]]) -> str:
    """:func:`model_sha256` from (file name, its SHA-256 hex) pairs, the model file first: for a
    caller that hashed the bytes as it wrote them."""
    h = hashlib.sha256()
    for name, digest in files:
        h.update(name.encode())
        h.update(digest.encode())
    return h.hexdigest()


def disk_bytes(path: str | os.PathLike[str]) -> int:
    """The model file's size plus that of the external-data files it names: what its weights
    take once loaded, near enough for an out-of-memory message. A large file is its weights:
    it is not parsed."""
    size = os.stat(path).st_size
    if size > 64 << 20:
        return size
    proto = onnx.load(os.fspath(path), load_external_data=False)
    folder = Path(path).parent
    files = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    return size + sum((folder / f).stat().st_size for f in files if (folder / f).is_file())


def large_weights(path: str | os.PathLike[str]) -> bool:
    """Whether the model at ``path`` holds ``LAZY_WEIGHTS_BYTES`` of weights or more (:func:`disk_bytes`): the
    models whose weights stay on disk, where issue 20's memory bound is what limits a run. False where the file
    cannot be read: loading it says why, in the command's own words."""
    try:
        return disk_bytes(path) >= LAZY_WEIGHTS_BYTES
    except (OSError, DecodeError, RuntimeError, ValueError, TypeError, UnicodeDecodeError):
        return False


# ModelProto's fields in tag form (field number << 3 | wire type), after ir_version (field 1, varint):
# producer_name/version, domain, model_version, doc_string, graph, opset_import, metadata_props.
_MODEL_TAGS = frozenset({0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72})


def looks_like_onnx(path: Path) -> bool:
    """Whether ``path`` starts as a serialized ONNX model does: ir_version (a small varint), then
    another ModelProto field. A TensorRT plan starts with its magic tag (ASCII), never 0x08; the
    check reads 3 bytes, so giving a model where an engine goes is named before TensorRT loads."""
    try:
        with open(path, "rb") as f:
            head = f.read(3)
    except OSError:
        return False
    return len(head) == 3 and head[0] == 0x08 and 1 <= head[1] <= 0x7F and head[2] in _MODEL_TAGS
