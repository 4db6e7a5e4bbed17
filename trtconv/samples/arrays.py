"""``.npy``/``.npz`` files as samples, refused before numpy allocates what a lying header declares."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trtconv.errors import DataError
from trtconv.samples.inputs import InputSpec

ARRAY_SUFFIXES = (".npy", ".npz")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


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


def read_array_sample(path: Path, inputs: Mapping[str, InputSpec]) -> dict[str, np.ndarray]:
    _check_sizes(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as exc:  # pickled object arrays, bad headers
        raise DataError(f"{path}: cannot load ({str(exc).splitlines()[0]})",
                        hint="save plain numeric arrays; pickled objects are refused") from exc
    except Exception as exc:  # numpy's header parser lets tokenize/syntax errors through on garbage
        raise DataError(f"{path}: cannot read ({first_line(exc)})",
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
            return {k: z[k] for k in z.files}
    except Exception as exc:  # a corrupt member: same policy as a corrupt .npy
        raise DataError(f"{path}: cannot read ({first_line(exc)})", hint="the file is truncated or corrupt") from exc
