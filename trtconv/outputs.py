"""Atomic outputs: every file trtconv writes appears whole or not at all.

CI pipelines trust what we leave behind, so a kill -9 or Ctrl-C mid-write must leave
the old file or none. We write a temp file in the destination folder (same file
system, so ``os.replace`` is atomic) and rename it at the end.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from trtconv.errors import CRASH_NOTE_ENV, OutputError, UsageError

TMP_PREFIX = ".trtconv-tmp-"
# Temp names carry host and pid, so a later write can tell a temp left by a killed
# process (kill -9, OOM killer, power loss) from one a live writer still owns.
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_OWNED = re.compile(re.escape(TMP_PREFIX) + r"([0-9a-f]{6})-(\d+)-")


# Folders this process creates temps in. A signal can land between a temp's creation and
# the `try` that would remove it; the CLI's interrupt path then removes what this process
# left in them (remove_own_temps), found by the host and pid in the names.
_TEMP_FOLDERS: set[str] = set()


def _tmp_prefix(name: str = "") -> str:
    return f"{TMP_PREFIX}{_HOST}-{os.getpid()}-" + (f"{name}." if name else "")


def temp_prefix(folder: Path, name: str = "") -> str:
    """The prefix for a temp this process is about to create in ``folder`` (noted first, so
    no interrupt can leave a temp in a folder remove_own_temps does not know)."""
    _TEMP_FOLDERS.add(os.fspath(folder))
    return _tmp_prefix(name)


def umask() -> int:
    """This process's umask, read without changing it where the OS allows (Linux)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(*, directory: bool = False) -> int:
    """The mode a new file (or folder) gets from open()/mkdir(), as ``cp`` would give it: mkstemp
    and mkdtemp make 0600/0700 temps, which would keep a shared CI cache from other users."""
    return (0o777 if directory else 0o666) & ~umask()


def remove_own_temps() -> list[str]:
    """Remove the temp files and folders this process still has; the names removed."""
    mine = _tmp_prefix()
    return [name for folder in sorted(_TEMP_FOLDERS) for name in _remove_temps(folder, lambda n: n.startswith(mine))]


def _remove_temps(folder: Path | str, wanted: Callable[[str], bool]) -> list[str]:
    """Remove the files and folders in ``folder`` whose names ``wanted`` accepts; the names
    removed (an entry that cannot be removed is skipped)."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not wanted(entry.name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_stale_temps(folder: Path) -> list[str]:
    """Remove temp files and folders that killed trtconv processes on this host left in ``folder``.

    Only names with this host's tag and a pid that no longer runs are touched, so a
    concurrent writer's temp (or another machine's, on a shared folder) is left alone.
    """

    def stale(name: str) -> bool:
        m = _OWNED.match(name)
        return bool(m) and m.group(1) == _HOST and not _pid_alive(int(m.group(2)))

    return _remove_temps(folder, stale)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (power loss); best effort where unsupported."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _label(path: Path, flag: str | None) -> str:
    return f"{flag} {path}" if flag else str(path)


def _writable_folder(folder: Path, path: Path, flag: str | None) -> None:
    """``folder`` exists, is a folder and this process may create files in it (``os.access`` asks the
    kernel: a read-only file system refuses even root, whom permission bits do not stop)."""
    if folder.is_dir():
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OutputError(f"{_label(path, flag)}: folder {folder} is not writable",
                              hint="choose a writable folder")
        return
    if folder.exists() or any(p.exists() and not p.is_dir() for p in folder.parents):
        blocker = next(p for p in (folder, *folder.parents) if p.exists() and not p.is_dir())
        raise OutputError(f"{_label(path, flag)}: {blocker} is a file, not a folder",
                          hint="choose a path under a folder")
    raise OutputError(f"{_label(path, flag)}: folder {folder} does not exist",
                      hint=f"create it with `mkdir -p {shlex.quote(str(folder))}`, then run the command again")


def check_not_the_model(path: Path, model: Path | str | None, flag: str, suffix: str) -> None:
    """A side output (``--report``, ``--deps``) named like the input model would overwrite it: exit 2, the hint a
    name of its own (``suffix``)."""
    if model is not None and Path(path).resolve() == Path(model).resolve():
        raise UsageError(f"{flag} {path} is the input model: writing it would overwrite the model",
                         hint=f"give it its own name, e.g. {flag} {shlex.quote(str(Path(path).with_suffix(suffix)))}")


def check_output_path(path: Path, *, force: bool, flag: str | None = None) -> None:
    """Fail early, before hours of work, if the file ``path`` cannot be written (``flag``: the option
    that named it, for the message)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{_label(path, flag)} is a directory", hint="give a file name for the output")
    if path.exists() and not force:
        raise UsageError(f"{_label(path, flag)} already exists", hint="pass --force to overwrite it")
    _writable_folder(path.parent if str(path.parent) else Path("."), path, flag)


def check_output_dir(path: Path, *, flag: str | None = None) -> None:
    """Fail early if the folder ``path`` cannot be created (with its parents) or written into: an
    existing one must be a writable folder, else its nearest existing ancestor must be one."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{_label(path, flag)} is a file, not a folder", hint="give a folder for it")
        _writable_folder(path, path, flag)
        return
    ancestor = next((p for p in path.parents if p.exists()), Path("."))
    _writable_folder(ancestor, path, flag)


def os_error(path: Path, exc: OSError) -> OutputError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"no space left writing {path}", hint="free disk space or choose another folder")
    if exc.errno == errno.EFBIG:
        return OutputError(f"cannot write {path}: file too large for this folder or process limit (ulimit -f)",
                           hint="raise the file-size limit or choose another folder")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {path}: {exc.strerror}", hint="choose a writable folder")
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


_os_error = os_error  # former name, kept for callers


@contextlib.contextmanager
def atomic_path(path: Path, *, force: bool = False, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it over ``path`` if the block succeeds."""
    path = Path(path)
    check_output_path(path, force=force)
    parent = path.parent if str(path.parent) else Path(".")
    sweep_stale_temps(parent)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(parent, path.name), suffix=suffix, dir=parent)
        try:
            os.fchmod(fd, default_mode())  # the rename keeps the temp's mode
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error(path, exc) from exc
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(parent)
    except OSError as exc:
        raise os_error(path, exc) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(parent: Path) -> Iterator[Path]:
    """A scratch folder inside ``parent`` (same file system), removed afterwards."""
    sweep_stale_temps(parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(parent), dir=parent))
    except OSError as exc:
        raise os_error(parent, exc) from exc
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: Path, data: bytes, *, force: bool = False) -> None:
    with atomic_path(path, force=force) as tmp:
        tmp.write_bytes(data)


def copy_file(source: Path, path: Path, *, force: bool = False, chunk: int = 1 << 20) -> str:
    """Copy ``source`` to ``path`` atomically, hashing the bytes on the way; their SHA-256 (hex)."""
    h = hashlib.sha256()
    with atomic_path(path, force=force) as tmp:
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                while block := src.read(chunk):
                    h.update(block)
                    dst.write(block)
        except OSError as exc:
            raise os_error(path, exc) from exc
    return h.hexdigest()


def write_text(path: Path, text: str, *, force: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), force=force)


def dumps_json(obj: Any) -> str:
    """The one JSON encoding trtconv emits: sorted keys, so equal inputs give equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, obj: Any, *, force: bool = False) -> None:
    write_text(path, dumps_json(obj), force=force)


# The `trtconv` command runs its work in a child process and stands by it (trtconv/launcher.py): if the
# child dies of a signal (a crash inside TensorRT or ONNX Runtime), the launcher removes what the run had
# written, as a failure would have. The child keeps the list, per stage, in the file CRASH_NOTE_ENV names.


def file_identity(path: Path) -> tuple[int, ...] | None:
    """Device, inode, size and mtime: an atomic write (a temp renamed into place) changes the inode."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def note_for_crash(stage: str, outputs: Iterable[tuple[Path, tuple[int, ...] | None]] = ()) -> None:
    """Record the stage starting now and the files a failure would remove if this run wrote them: each with
    its identity before the run (None: absent), so that one it has not replaced yet is left alone."""
    where = os.environ.get(CRASH_NOTE_ENV)
    if not where:
        return
    with contextlib.suppress(OSError):
        tmp = where + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"stage": stage, "outputs": [[os.fspath(p), ident] for p, ident in outputs],
                       "temp_folders": sorted(_TEMP_FOLDERS)}, fh)
        os.replace(tmp, where)


def remove_crashed_outputs(note: dict[str, Any]) -> list[str]:
    """Remove the files a crashed run wrote (their identity is not the one noted before the run), and its
    temps; the paths removed."""
    removed = []
    for path, before in note.get("outputs") or []:
        now = file_identity(Path(path))
        if now is not None and now != (tuple(before) if before is not None else None):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    for folder in note.get("temp_folders") or []:
        sweep_stale_temps(Path(folder))  # the crashed process's: its pid no longer runs
    return removed


def read_crash_note(where: str) -> dict[str, Any]:
    """What :func:`note_for_crash` last recorded ({} when nothing was)."""
    try:
        with open(where, encoding="utf-8") as fh:
            note = json.load(fh)
    except (OSError, ValueError):
        return {}
    return note if isinstance(note, dict) else {}
