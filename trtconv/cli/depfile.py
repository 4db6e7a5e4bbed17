"""Make-style dependency files (``--deps FILE``), like ``gcc -MD -MP``.

A Makefile rule that runs trtconv with ``--deps $@.d`` and has ``-include *.d`` rebuilds
its target exactly when one of the files the result was made from changes: the ONNX,
its external-data files, calibration data, plugin maps and libraries, the spec file.
Those are found from the command's own parameters (every ``click.Path`` that is not an
output), so a new input flag is covered without touching this module.

Like ``gcc -MP``, each prerequisite also gets an empty rule of its own, so deleting or
renaming an input makes make rebuild instead of failing with "No rule to make target".
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from trtconv.api import load_model
from trtconv.errors import UsageError
from trtconv.outputs import check_not_the_model, check_output_path, write_text

F = TypeVar("F", bound=Callable[..., Any])
# The files a run writes, from its parameters; the primary output last.
OutputsFn = Callable[[Mapping[str, Any]], Sequence[Path]]

# Parameters holding paths that are *not* inputs of the result.
NOT_INPUTS = frozenset({"output", "deps", "cache_dir", "print_config"})
INPUTS_KEY = "trtconv.inputs"
ONNX_SUFFIXES = (".onnx",)


def make_quote(path: str) -> str:
    """Escape a path for a make rule: spaces and ``#`` get a backslash, ``$`` doubles (gcc's rules)."""
    if "\n" in path or "\r" in path:
        raise UsageError(f"path {path!r} contains a newline, which make cannot express",
                         hint="rename the file")
    out = []
    backslashes = 0
    for ch in path:
        if ch == "\\":
            backslashes += 1
            out.append(ch)
            continue
        if ch in " \t#":
            out.append("\\" * backslashes)  # backslashes before an escaped char are doubled
            out.append("\\" + ch)
        elif ch == "$":
            out.append("$$")
        else:
            out.append(ch)
        backslashes = 0
    return "".join(out)


def render(targets: Sequence[str | os.PathLike[str]], prerequisites: Iterable[str | os.PathLike[str]]) -> str:
    """The text of a dependency file: one rule for the targets, an empty rule per prerequisite."""
    if not targets:
        raise ValueError("a dependency file needs at least one target")
    deps = list(dict.fromkeys(str(p) for p in prerequisites))
    head = " ".join(make_quote(str(t)) for t in targets) + ":"
    lines = [head + "".join(f" \\\n  {make_quote(d)}" for d in deps)]
    lines += [f"\n{make_quote(d)}:" for d in deps]
    return "\n".join(lines) + "\n"


def write_depfile(path: Path, targets: Sequence[str | os.PathLike[str]],
                  prerequisites: Iterable[str | os.PathLike[str]]) -> None:
    """Write atomically; a dependency file is always replaced, like gcc's."""
    write_text(Path(path), render(targets, prerequisites), force=True)


def model_files(path: Path) -> list[Path]:
    """An ONNX file and the external-data files it references (validated by the loader)."""

    loaded = load_model(path, load_weights=False, check=False)
    return [path, *loaded.external_files]


def expand_input(path: Path) -> list[Path]:
    """The files one input path stands for: a folder is itself plus every file under it."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        return [path, *files]
    if path.is_file() and path.suffix.lower() in ONNX_SUFFIXES:
        return model_files(path)
    return [path] if path.exists() else []


def _values(value: Any) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [Path(v) for v in value if v is not None]
    return [Path(value)]


def single_output(params: Mapping[str, Any]) -> list[Path]:
    """The usual case: the run writes ``-o/--output``."""
    return _values(params.get("output"))


def command_inputs(ctx: click.Context, *, exclude: Iterable[str] = ()) -> list[Path]:
    """Every file the command's result depends on, from its path-typed parameters, in flag order."""
    skip = NOT_INPUTS | set(exclude)
    found: list[Path] = []
    for p in ctx.command.params:
        if p.name is None or p.name in skip or not isinstance(p.type, click.Path):
            continue
        for v in _values(ctx.params.get(p.name)):
            found.extend(expand_input(v))
    return list(dict.fromkeys(found))


def cached_inputs(ctx: click.Context, exclude: Iterable[str] = ()) -> list[Path]:
    """:func:`command_inputs`, computed once per invocation (``--deps`` and ``--cache-dir`` share it)."""
    key = f"{INPUTS_KEY}:{','.join(sorted(exclude))}"
    if key not in ctx.meta:
        ctx.meta[key] = command_inputs(ctx, exclude=exclude)
    return list(ctx.meta[key])


def succeeded(exc: BaseException) -> bool:
    return isinstance(exc, click.exceptions.Exit) and exc.exit_code == 0


def deps_option(outputs: OutputsFn = single_output, not_inputs: Sequence[str] = ()) -> Callable[[F], F]:
    """Add ``--deps FILE``: after a successful run, write a make dependency file for its outputs.

    ``outputs`` lists the files the run writes (the targets); ``not_inputs`` names path
    parameters that are not inputs (outputs, or a timing cache the build updates).
    """

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, deps: Path | None = None, **kwargs: Any) -> Any:
            if deps is None:
                return f(*args, **kwargs)
            check_output_path(deps, force=True, flag="--deps")  # before any work: nothing written if not
            ctx = click.get_current_context()
            check_not_the_model(deps, ctx.params.get("model"), "--deps", ".d")
            targets = list(outputs(ctx.params))
            if not targets:
                raise UsageError("--deps needs an output file to name as the target", hint="give -o/--output")
            try:
                result = f(*args, **kwargs)
            except click.exceptions.Exit as exc:
                if succeeded(exc):
                    write_depfile(deps, targets, cached_inputs(ctx, not_inputs))
                raise
            write_depfile(deps, targets, cached_inputs(ctx, not_inputs))
            return result

        return click.option(  # type: ignore[return-value]
            "--deps", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
            help="Write a make dependency file (like gcc -MD -MP) listing every input of the result.",
        )(wrapper)

    return decorate
