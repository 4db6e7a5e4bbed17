"""External data: the references a model makes to weight files beside it, checked before
anything is opened (locations come from strangers' files: no escaping the model's folder,
no reads past a file's end)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx

from trtconv.errors import InvalidModelError
from trtconv.load.proto import iter_tensors
from trtconv.onnxutil import (  # noqa: F401 - re-exported
    has_lazy_weights,
    is_lazy,
    lazy_span,
    read_span,
    tensor_array,
)


@dataclass(frozen=True)
class ExternalRef:
    tensor: str
    location: str
    offset: int
    length: int | None



def external_refs(model: onnx.ModelProto) -> list[tuple[onnx.TensorProto, ExternalRef]]:
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


def external_bytes(refs: list[ExternalRef], base_dir: Path) -> dict[str, int]:
    """Bytes each external tensor can read: its length, else up to the end of its file."""
    out: dict[str, int] = {}
    for r in refs:
        if r.length is not None:
            out[r.tensor] = r.length
        else:
            out[r.tensor] = max(0, (base_dir / r.location).stat().st_size - r.offset)
    return out


# Models with at least this many bytes of external data keep them on disk where a stage
# reads weights one at a time (rewrite, FP16): ``load_model(lazy_from=...)``.
LAZY_WEIGHTS_BYTES = 256 << 20

# Smaller external tensors are loaded even in a lazy load: shape tensors and scalars, which
# shape inference and constant folding need as values (and whose bytes cost nothing).
LAZY_TENSOR_MIN = 64 << 10


def make_lazy(pairs: list[tuple[onnx.TensorProto, ExternalRef]], base_dir: Path) -> None:
    """Point every external tensor of at least ``LAZY_TENSOR_MIN`` bytes at its data file by
    absolute path, so that it can be read (:func:`tensor_array`, graphsurgeon) or streamed into
    an output (``save``) on demand wherever the proto goes, without ever being loaded whole;
    load the smaller ones. Run after :func:`validate_external_refs`: the paths are the checked ones."""
    base = base_dir.resolve()
    for t, ref in pairs:
        location = str((base / ref.location).resolve())
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
        if lazy_span(t)[2] < LAZY_TENSOR_MIN:
            raw = read_span(t)
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = raw


def copy_lazy(t: onnx.TensorProto, out, chunk: int = 16 << 20) -> int:
    """Stream a lazy tensor's bytes into the open file ``out``, ``chunk`` bytes at a time; bytes written."""
    location, offset, length = lazy_span(t)
    left = length
    with open(location, "rb") as fh:
        fh.seek(offset)
        while left:
            block = fh.read(min(chunk, left))
            if not block:
                raise InvalidModelError(f"tensor {t.name!r}: external data file {location!r} is shorter than "
                                        "when the model was loaded", hint="was it changed while trtconv ran?")
            out.write(block)
            left -= len(block)
    return length

