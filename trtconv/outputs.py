"""Atomic outputs: every file trtconv writes appears whole or not at all.

CI pipelines trust what we leave behind, so a kill -9 or Ctrl-C mid-write must leave
the old file or none. We write a temp file in the destination folder (same file
system, so ``os.replace`` is atomic) and rename it at the end.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtconv.errors import OutputError, UsageError

TMP_PREFIX = ".trtconv-tmp-"


def check_output_path(path: Path, *, force: bool) -> None:
    """Fail early, before hours of work, if ``path`` cannot be written."""
    path = Path(path)
    if path.exists() and not force:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")
    if path.is_dir():
        raise UsageError(f"{path} is a directory", hint="give a file name for the output")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output folder {parent} does not exist", hint="create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"output folder {parent} is not writable", hint="choose another -o path")


def _os_error(path: Path, exc: OSError) -> OutputError:
    if exc.errno == errno.ENOSPC:
        return OutputError(f"no space left writing {path}", hint="free disk space or choose another folder")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {path}: {exc.strerror}", hint="choose a writable folder")
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def atomic_path(path: Path, *, force: bool = False, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it over ``path`` if the block succeeds."""
    path = Path(path)
    check_output_path(path, force=force)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", suffix=suffix, dir=parent)
        os.close(fd)
    except OSError as exc:
        raise _os_error(path, exc) from exc
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise _os_error(path, exc) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(parent: Path) -> Iterator[Path]:
    """A scratch folder inside ``parent`` (same file system), removed afterwards."""
    import shutil

    try:
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=parent))
    except OSError as exc:
        raise _os_error(parent, exc) from exc
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: Path, data: bytes, *, force: bool = False) -> None:
    with atomic_path(path, force=force) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str, *, force: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), force=force)


def dumps_json(obj: Any) -> str:
    """The one JSON encoding trtconv emits: sorted keys, so equal inputs give equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, obj: Any, *, force: bool = False) -> None:
    write_text(path, dumps_json(obj), force=force)
