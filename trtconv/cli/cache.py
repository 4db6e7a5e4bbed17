"""A content-addressed result cache (``--cache-dir DIR``, or ``TRTCONV_RESULT_CACHE_DIR``).

The key is a SHA-256 of what decides the result: the bytes of every input file, the
command's normalized settings, and the versions of trtconv and the libraries that
compute it (onnx, onnxruntime, onnx-graphsurgeon, TensorRT), plus anything a command
adds (a build adds the GPU). Same key, same result: a hit copies the stored outputs into
place atomically, replays what the command printed on stdout (so ``--json`` reads the
same), says "cache hit" on stderr and exits 0. Only successful runs are stored.

Layout: ``DIR/<key[:2]>/<key>/`` holds ``entry.json`` and ``files/``. An entry is built
in a temp folder inside DIR and renamed into place, so parallel ``make -j`` jobs never
see half an entry; if two jobs store the same key, the first rename wins.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from trtconv import __version__
from trtconv.api import file_sha256, probe_driver
from trtconv.cli.config import jsonable
from trtconv.cli.depfile import OutputsFn, cached_inputs, single_output, succeeded
from trtconv.cli.main import _dist_version
from trtconv.outputs import TMP_PREFIX, atomic_path, check_output_path, default_mode, dumps_json, temp_prefix

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)

ENTRY = "entry.json"
# Not TRTCONV_CACHE_DIR: that one only says where timing caches live; this one turns result caching on.
ENV_VAR = "TRTCONV_RESULT_CACHE_DIR"
FILES = "files"
# Settings that change how a command runs or reports, never what it produces.
NOT_SETTINGS = frozenset({"force", "deps", "cache_dir", "config", "print_config", "triton_repo", "report"})
KEYED_DISTRIBUTIONS = ("onnx", "onnxruntime", "onnx-graphsurgeon", "numpy", "tensorrt")


@dataclass(frozen=True)
class CacheKey:
    digest: str
    material: dict[str, Any]  # what was hashed, kept in the entry for `why did this miss?`

    @property
    def short(self) -> str:
        return self.digest[:12]


@dataclass(frozen=True)
class Entry:
    path: Path
    stdout: str
    files: tuple[str, ...]  # relative to the primary output's folder; the primary is last


def _dist_versions() -> dict[str, str | None]:

    return {d: _dist_version(d) for d in KEYED_DISTRIBUTIONS}


def gpu_identity() -> dict[str, Any]:
    """The GPUs and driver an engine is built for: an engine from one GPU is not valid on another."""

    cuda, gpus, _error = probe_driver()
    return {"cuda_driver": cuda, "gpus": [[g.name, g.compute_capability] for g in gpus]}


def normalize_settings(params: Mapping[str, Any], drop: Iterable[str] = ()) -> dict[str, Any]:
    """Settings in a canonical JSON-able form: paths as strings, tuples as lists, run-only flags dropped."""
    skip = NOT_SETTINGS | set(drop)
    return {k: jsonable(v) for k, v in sorted(params.items()) if k not in skip}


def cache_key(command: str, settings: Mapping[str, Any], inputs: Sequence[Path],
              extra: Mapping[str, Any] | None = None) -> CacheKey:
    """The key of a run: hash of input contents + normalized settings + versions."""

    material = {
        "trtconv": __version__,
        "versions": _dist_versions(),
        "command": command,
        "settings": dict(settings),
        "inputs": [[str(p), file_sha256(p) if p.is_file() else "dir"] for p in inputs],
        "extra": dict(extra or {}),
    }
    digest = hashlib.sha256(dumps_json(material).encode("utf-8")).hexdigest()
    return CacheKey(digest, material)


def entry_dir(cache_dir: Path, key: CacheKey) -> Path:
    return Path(cache_dir) / key.digest[:2] / key.digest


def lookup(cache_dir: Path, key: CacheKey) -> Entry | None:
    """The stored entry for ``key``, or None (a damaged entry counts as a miss)."""
    d = entry_dir(cache_dir, key)
    try:
        meta = json.loads((d / ENTRY).read_text(encoding="utf-8"))
        files = tuple(meta["files"])
        if not all((d / FILES / f).is_file() for f in files):
            return None
        return Entry(d, str(meta.get("stdout", "")), files)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(cache_dir: Path, key: CacheKey, files: Sequence[Path], base: Path, stdout: str) -> Path | None:
    """Copy ``files`` (under ``base``) into a new entry; None if another writer got there first."""
    final = entry_dir(cache_dir, key)
    if final.exists():
        return None
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(cache_dir), dir=cache_dir))
    try:
        tmp.chmod(default_mode(directory=True))  # the entry is renamed into place with this mode
        names = [str(f.relative_to(base)) for f in files]
        (tmp / FILES).mkdir()
        for f, name in zip(files, names):
            (tmp / FILES / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, tmp / FILES / name)
        meta = {"key": key.digest, "material": key.material, "files": names, "stdout": stdout,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / ENTRY).write_text(dumps_json(meta), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:  # a parallel job stored the same key first: theirs is as good
            return None
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def restore(entry: Entry, base: Path, *, force: bool, guarded: Iterable[Path] = ()) -> list[Path]:
    """Copy an entry's files into ``base`` atomically, side files first and the primary output last.

    ``guarded`` are the outputs the command itself refuses to overwrite without ``--force``
    (its ``-o``); derived files it rewrites freely (a build's default prepared ONNX) are not.
    """
    for path in guarded:
        if path.name in entry.files and path.parent == base:
            check_output_path(path, force=force)
    out = []
    for name in entry.files:
        dest = base / name
        with atomic_path(dest, force=True) as tmp:
            shutil.copyfile(entry.path / FILES / name, tmp)
        out.append(dest)
    return out


def side_files(outputs: Sequence[Path]) -> dict[Path, tuple[int, int]]:
    """Files beside each output whose name extends it (``x.onnx.data``, ``x.engine.json``), with (mtime, size)."""
    out: dict[Path, tuple[int, int]] = {}
    for primary in outputs:
        parent = primary.parent if str(primary.parent) else Path(".")
        if not parent.is_dir():
            continue
        for p in parent.iterdir():
            if p.name.startswith(primary.name) and p.name != primary.name and not p.name.startswith(TMP_PREFIX):
                with contextlib.suppress(OSError):
                    st = p.stat()
                    if p.is_file():
                        out[p] = (st.st_mtime_ns, st.st_size)
    return out


def produced_files(outputs: Sequence[Path], before: Mapping[Path, tuple[int, int]],
                   exclude: Iterable[Path] = ()) -> list[Path]:
    """The declared outputs that exist plus the side files the run created or changed; primary last.

    ``before`` is :func:`side_files` taken before the run; restoring the primary last
    completes the set, as :func:`trtconv.load.save_model` writes data before the model.
    """
    skip = {Path(p) for p in exclude} | set(outputs)
    side = sorted(p for p, sig in side_files(outputs).items() if before.get(p) != sig and p not in skip)
    return [*side, *(p for p in outputs if p.is_file())]


class _Tee(io.TextIOBase):
    """stdout that also keeps a copy, so a cache hit can print what the real run printed."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.copy = io.StringIO()

    def write(self, s: str) -> int:
        self.copy.write(s)
        return self._stream.write(s)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(self._stream.isatty())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)


def cache_option(
    outputs: OutputsFn = single_output,
    not_inputs: Sequence[str] = (),
    key_extra: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    validate: Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Path]], list[str]] | None = None,
) -> Callable[[F], F]:
    """Add ``--cache-dir DIR`` to a command function (below @click.command).

    ``outputs`` lists the files a run writes (primary last; side files named after an
    output, like ``x.onnx.data``, are found by themselves); ``not_inputs`` names path
    parameters that are not inputs; ``key_extra(params)`` adds what else decides the
    result (a build: :func:`gpu_identity` and the engine's identity hash); ``validate(params,
    key material, {file name: stored path})`` says why a stored entry must not be restored (a build:
    its engine or manifest does not hold the identity): such an entry is dropped and the command runs.
    """

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, cache_dir: Path | None = None, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            declared = [Path(p) for p in outputs(ctx.params)]
            if cache_dir is None or not declared:
                return f(*args, **kwargs)
            primary = declared[-1]
            base = primary.parent if str(primary.parent) else Path(".")
            if any(p.parent != primary.parent for p in declared):
                log.warning("--cache-dir: outputs in several folders are not cached")
                return f(*args, **kwargs)
            inputs = [p for p in cached_inputs(ctx, not_inputs) if p != ctx.params.get("config")]
            settings = normalize_settings(ctx.params)
            key = cache_key(ctx.command.name or "", settings, inputs, key_extra(ctx.params) if key_extra else None)
            try:
                Path(cache_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                click.echo(f"trtconv: warning: cache folder {cache_dir} unusable ({exc.strerror or exc}); "
                           "running without the cache", err=True)
                return f(*args, **kwargs)
            entry = lookup(Path(cache_dir), key)
            if entry is not None and validate is not None:
                problems = validate(ctx.params, key.material, {n: entry.path / FILES / n for n in entry.files})
                if problems:
                    click.echo(f"trtconv: warning: cache entry {key.short} refused: {'; '.join(problems)}; "
                               "running the command again", err=True)
                    shutil.rmtree(entry.path, ignore_errors=True)
                    entry = None
            if entry is not None:
                restore(entry, base, force=bool(ctx.params.get("force")), guarded=single_output(ctx.params))
                sys.stdout.write(entry.stdout)
                sys.stdout.flush()
                click.echo(f"trtconv: cache hit ({key.short}): {primary} restored from {cache_dir}", err=True)
                return None
            log.info("cache miss (%s): running `trtconv %s`", key.short, ctx.command.name)
            before = side_files(declared)
            deps = ctx.params.get("deps")
            exclude = [Path(deps)] if deps else []
            tee = _Tee(sys.stdout)
            try:
                with contextlib.redirect_stdout(tee):
                    result = f(*args, **kwargs)
            except click.exceptions.Exit as exc:
                if succeeded(exc):
                    _store(Path(cache_dir), key, produced_files(declared, before, exclude), base, tee.copy.getvalue())
                raise
            _store(Path(cache_dir), key, produced_files(declared, before, exclude), base, tee.copy.getvalue())
            return result

        return click.option(  # type: ignore[return-value]
            "--cache-dir", type=click.Path(path_type=Path, file_okay=False), envvar=ENV_VAR, metavar="DIR",
            help=f"Reuse results whose inputs and settings are unchanged (content-addressed; env {ENV_VAR}).",
        )(wrapper)

    return decorate


def _store(cache_dir: Path, key: CacheKey, files: list[Path], base: Path, stdout: str) -> None:
    if not files:
        return
    try:
        if store(cache_dir, key, files, base, stdout):
            log.info("cache: stored %s as %s", files[-1], key.short)
    except OSError as exc:  # the result is fine; only the cache could not keep it
        click.echo(f"trtconv: warning: could not store {files[-1]} in the cache: {exc.strerror or exc}", err=True)
