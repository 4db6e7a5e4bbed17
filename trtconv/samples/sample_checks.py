"""One sample checked against the model's inputs (names, dtype, rank, fixed dims, NaN/Inf), and
.npy/.npz files read without trusting their headers: every failure names where the sample came from.
"""

from __future__ import annotations

import logging
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from trtconv.errors import DataError
from trtconv.load import input_dims

log = logging.getLogger(__name__)

Sample = dict[str, np.ndarray]
Dim = int | str | None


@dataclass(frozen=True)
class InputSpec:
    """What the model expects of one input: element type and dims (int fixed, str/None dynamic)."""

    dtype: np.dtype
    dims: tuple[Dim, ...]


def model_inputs(model: onnx.ModelProto) -> dict[str, InputSpec]:
    """The model's real inputs (initializers excluded) as :class:`InputSpec`."""
    inits = {i.name for i in model.graph.initializer}
    dims = input_dims(model)
    out: dict[str, InputSpec] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        out[vi.name] = InputSpec(dt, tuple(dims.get(vi.name, [])))
    return out


def check_sample(sample: Mapping[str, Any], inputs: Mapping[str, InputSpec], origin: str, *,
                 noted: set[tuple[str, ...]] | None = None) -> Sample:
    """Validate one sample against the model's inputs; DataError naming ``origin`` if wrong.

    Keys that are not model inputs are ignored (exports often save labels or metadata
    beside the inputs), with a log note once per set of such keys in ``noted``.
    """
    if not isinstance(sample, Mapping):
        raise DataError(f"{origin}: a sample must be a dict of input name -> array, got {type(sample).__name__}")
    missing = [n for n in inputs if n not in sample]
    extra = tuple(sorted(str(n) for n in sample if n not in inputs))
    if missing:
        msg = "missing input(s) " + ", ".join(repr(n) for n in missing)
        if extra:
            msg += "; it has " + ", ".join(repr(n) for n in extra)
        hint = f"the model's inputs are: {', '.join(inputs)}"
        if origin.endswith(".npz"):
            first = next(iter(inputs))
            hint += (f"; an .npz holds one sample keyed by input name ({first}=...) or many keyed "
                     f"NNN/<input> (000/{first}, 001/{first}, ...)")
        raise DataError(f"{origin}: {msg}", hint=hint)
    if extra and (noted is None or extra not in noted):
        if noted is not None:
            noted.add(extra)
        log.warning("%s: ignoring key(s) %s that are not inputs of the model (inputs: %s)", origin,
                    ", ".join(repr(k) for k in extra), ", ".join(inputs))
    out: Sample = {}
    for name, spec in inputs.items():
        arr = np.asarray(sample[name])
        if arr.dtype != spec.dtype:
            raise DataError(
                f"{origin}: input {name!r} has dtype {arr.dtype}, the model wants {spec.dtype}",
                hint=f"save it as {spec.dtype} (e.g. arr.astype(np.{spec.dtype.name}))",
            )
        if arr.size == 0:
            raise DataError(f"{origin}: input {name!r} is empty (shape {list(arr.shape)})",
                            hint="every sample needs data for every input")
        if spec.dims and arr.ndim != len(spec.dims):
            raise DataError(
                f"{origin}: input {name!r} has shape {list(arr.shape)} (rank {arr.ndim}), "
                f"the model wants rank {len(spec.dims)} {list(spec.dims)}",
                hint="include the batch dimension" if arr.ndim == len(spec.dims) - 1 else
                f"give samples of shape {'x'.join(str(d) if isinstance(d, int) else 'N' for d in spec.dims)}",
            )
        for i, (have, want) in enumerate(zip(arr.shape, spec.dims)):
            if isinstance(want, int) and have != want:
                shape = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.dims)
                hint = f"give samples of shape {shape}, the model's fixed dims as they are"
                if i == 0 and have == 1:  # an image is a sample of batch 1
                    hint += (f"; an image is one sample of batch 1: stack {want} into each .npy (or yield them from "
                             "--calib-loader)")
                raise DataError(
                    f"{origin}: input {name!r} has shape {list(arr.shape)}, the model fixes dim {i} to {want} "
                    f"({list(spec.dims)})", hint=hint)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            bad = int(np.count_nonzero(~np.isfinite(arr)))
            raise DataError(f"{origin}: input {name!r} contains {bad} NaN/Inf value(s)")
        out[name] = arr
    return out


def _declared_bytes(fp: Any) -> tuple[tuple[int, ...], int] | None:
    """(shape, bytes through the end of the data) an .npy header promises; None if not plain numeric."""
    fmt = np.lib.format
    version = fmt.read_magic(fp)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(fp)
    else:
        shape, _, dtype = fmt._read_array_header(fp, version)  # type: ignore[attr-defined]  # 3.0: utf-8 header
    if dtype.hasobject:
        return None  # np.load refuses it (allow_pickle=False) with its own message
    return tuple(shape), fp.tell() + math.prod(shape) * dtype.itemsize


def _check_sizes(path: Path) -> None:
    """Refuse arrays whose header declares more data than the file holds, before numpy allocates it."""
    try:
        if path.suffix.lower() == ".npy":
            with open(path, "rb") as fh:
                members = [(path.name, _declared_bytes(fh), path.stat().st_size)]
        else:
            with zipfile.ZipFile(path) as zf:
                members = []
                for info in zf.infolist():
                    if info.filename.endswith(".npy"):
                        with zf.open(info) as fh:
                            members.append((info.filename, _declared_bytes(fh), info.file_size))
    except Exception:  # a malformed header: np.load reports it below with its own message
        return
    for member, declared, size in members:
        if declared is not None and declared[1] > size:
            where = "" if member == path.name else f" (array {member!r})"
            raise DataError(
                f"{path}{where}: header declares shape {list(declared[0])}, {declared[1]} bytes, "
                f"but only {size} are there",
                hint="the file is truncated or corrupt",
            )


def read_npy_sample(path: Path, inputs: Mapping[str, InputSpec], group: str | None = None) -> dict[str, np.ndarray]:
    _check_sizes(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as exc:  # pickled object arrays, bad headers
        raise DataError(f"{path}: cannot load ({str(exc).splitlines()[0]})",
                        hint="save plain numeric arrays; pickled objects are refused") from exc
    except Exception as exc:  # numpy's header parser lets tokenize/syntax errors through on garbage
        raise DataError(f"{path}: cannot read ({_first_line(exc)})",
                        hint="the file is truncated or not a numpy file") from exc
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise DataError(
                f"{path}: a .npy file holds one array but the model has {len(inputs)} inputs",
                hint=f"save an .npz with keys {', '.join(inputs)}",
            )
        return {next(iter(inputs)): loaded}
    try:
        with loaded as z:
            if group is not None:
                return {k[len(group) + 1:]: z[k] for k in z.files if k.startswith(group + "/")}
            return {k: z[k] for k in z.files}
    except Exception as exc:  # a corrupt member: same policy as a corrupt .npy
        raise DataError(f"{path}: cannot read ({_first_line(exc)})", hint="the file is truncated or corrupt") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__
