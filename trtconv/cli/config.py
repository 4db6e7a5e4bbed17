"""Build spec files: everything a command line can say, written once in TOML.

``trtconv build --config trtconv.toml`` reads a flat TOML table whose keys are the
command's own long flag names (``precision``, ``min-shapes``, ``plugin-map``...), the way
ruff and black read their settings from pyproject.toml. The schema is therefore the
command's click parameters themselves and cannot drift from the CLI.

Precedence is click's own: the file's values become the context's ``default_map``, so a
flag on the command line (or its environment variable) wins over the file, and the file
wins over the built-in defaults. ``ctx.get_parameter_source`` then tells, per setting,
where the effective value came from; ``--print-config`` shows it.

Relative paths in a spec file are relative to the file's folder (as in a Makefile or
pyproject.toml), so a spec can sit next to its model and be used from anywhere.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from trtconv.cli.output import print_json
from trtconv.errors import OutputError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (JetPack 6): the same parser, from PyPI
    import tomli as tomllib

F = TypeVar("F", bound=Callable[..., Any])

# Parameters that steer reading/printing the spec itself; never settable from a spec.
META_PARAMS = frozenset({"config", "print_config"})

SOURCE_NAMES = {
    ParameterSource.COMMANDLINE: "command line",
    ParameterSource.ENVIRONMENT: "environment",
    ParameterSource.DEFAULT_MAP: "spec file",
    ParameterSource.DEFAULT: "default",
    ParameterSource.PROMPT: "prompt",
}


def spec_keys(command: click.Command) -> dict[str, click.Parameter]:
    """TOML key -> click parameter: the first long flag without ``--`` (``--min-shapes`` -> ``min-shapes``)."""
    keys: dict[str, click.Parameter] = {}
    for p in command.params:
        if not p.expose_value or p.name is None or p.name in META_PARAMS:
            continue
        longs = [o for o in p.opts if o.startswith("--")] if isinstance(p, click.Option) else []
        keys[longs[0][2:] if longs else p.name.replace("_", "-")] = p
    return keys


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; every failure becomes one line naming the file."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"spec file {path}: no such file", hint="check the --config path") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"spec file {path} is a directory", hint="give the path of a .toml file") from exc
    except OSError as exc:
        raise OutputError(f"cannot read spec file {path}: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"spec file {path} is not UTF-8 text", hint="save it as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"spec file {path} is not valid TOML: {exc}",
            hint="see docs/config.md for the format; strings need quotes, e.g. precision = \"fp16\"",
        ) from exc


def _unknown_key(path: Path, key: str, keys: Mapping[str, click.Parameter], command: str) -> UsageError:
    by_param = {p.name.replace("_", "-"): k for k, p in keys.items() if p.name}
    guess = by_param.get(key) or next(iter(difflib.get_close_matches(key, list(keys), n=1, cutoff=0.6)), None)
    hint = f"did you mean {guess!r}?" if guess else f"`trtconv {command} --help` lists the flags; keys are their long names"
    return UsageError(f"spec file {path}: unknown key {key!r} for `trtconv {command}`", hint=hint)


def _is_path(p: click.Parameter) -> bool:
    return isinstance(p.type, click.Path)


def _is_shapes(key: str) -> bool:
    return key == "shapes" or key.endswith("-shapes")


def _shapes_table(path: Path, key: str, table: Mapping[str, Any]) -> str:
    """``{images = [1, 3, 640, 640]}`` -> ``"images:1x3x640x640"`` (the CLI's --shapes form)."""
    items = []
    for name, dims in table.items():
        if not isinstance(dims, list) or not dims or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims
        ):
            raise UsageError(
                f"spec file {path}: {key}.{name} must be a list of positive integers, got {dims!r}",
                hint=f"e.g. {key} = {{ {name} = [1, 3, 640, 640] }}",
            )
        items.append(f"{name}:" + "x".join(str(d) for d in dims))
    return ",".join(items)


def _kind(p: click.Parameter) -> str:
    """What one value of ``p`` is: bool, integer, float, path, choice, string, or value (anything)."""
    t = p.type
    if isinstance(t, click.types.BoolParamType) or (isinstance(p, click.Option) and p.is_flag and not p.count):
        return "bool"
    if isinstance(t, click.types.IntParamType):
        return "integer"
    if isinstance(t, click.types.FloatParamType):
        return "float"
    if isinstance(t, click.Path):
        return "path"
    if isinstance(t, click.Choice):
        return "choice"
    return "string" if isinstance(t, click.types.StringParamType) else "value"


_PY_TYPE: dict[str, type] = {"bool": bool, "integer": int, "float": float, "path": str, "choice": str,
                             "string": str, "value": object}
_TOML_KIND = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _check_scalar(path: Path, key: str, p: click.Parameter, value: Any, command: str) -> Any:
    """TOML types must match the flag's type: no silent "yes" -> True or 5 -> "5"."""
    want = _PY_TYPE[_kind(p)]
    ok = isinstance(value, want) and not (want in (int, float) and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if isinstance(value, (dict, list)) and want is object:
        ok = False
    if not ok:
        kind = _TOML_KIND.get(want, "a single value")
        got = _toml_value(value) if _tomlable(value) else repr(value)
        raise UsageError(f"spec file {path}: {key} must be {kind}, got {got}",
                         hint=f"`trtconv {command} --help` describes --{key}")
    if _is_path(p):  # relative to the spec's folder; "a/../b" -> "b", as a Makefile would spell it
        value = os.path.normpath(path.parent / Path(value).expanduser())
    return value


def spec_defaults(path: Path, data: Mapping[str, Any], command: click.Command, ctx: click.Context) -> dict[str, Any]:
    """Validate a parsed spec against ``command``; return click's ``default_map`` (param name -> value)."""
    keys = spec_keys(command)
    name = command.name or "trtconv"
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for raw_key, value in data.items():
        key = raw_key.replace("_", "-")
        if key not in keys and isinstance(value, dict):  # [build], as pyproject.toml would have it
            raise UsageError(f"spec file {path}: [{raw_key}] is a section; a spec file is flat, its keys at the top "
                             f"level, one file per command", hint=f"delete the line [{raw_key}] (docs/config.md)")
        if key not in keys:
            raise _unknown_key(path, raw_key, keys, name)
        if key in seen:
            raise UsageError(f"spec file {path}: {seen[key]!r} and {raw_key!r} set the same flag --{key}")
        seen[key] = raw_key
        p = keys[key]
        if isinstance(value, dict):
            if not _is_shapes(key):
                raise UsageError(f"spec file {path}: {key} must be a value, not a table",
                                 hint="docs/config.md lists each key's type")
            value = _shapes_table(path, key, value)
        if getattr(p, "multiple", False) or p.nargs != 1:  # a repeatable flag: a list (or one value)
            value = [_check_scalar(path, key, p, v, name) for v in (value if isinstance(value, list) else [value])]
        else:
            if isinstance(value, list):
                if not (_is_shapes(key) and all(isinstance(v, str) for v in value)):
                    raise UsageError(f"spec file {path}: {key} takes one value, got a list",
                                     hint=f"--{key} may be given only once")
                value = ",".join(value)  # shapes = ["x:1x3x8x8", "y:1x8"]
            value = _check_scalar(path, key, p, value, name)
        try:  # the flag's own validation (choices, ranges), reported against the key
            p.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise UsageError(f"spec file {path}: {key}: {exc.message}") from exc
        assert p.name is not None
        out[p.name] = value
    return out


def _load_spec_callback(ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    if value is None or ctx.resilient_parsing:
        return value
    defaults = spec_defaults(Path(value), read_toml(Path(value)), ctx.command, ctx)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def toml_type(p: click.Parameter) -> str:
    """The TOML type a key takes, as docs/config.md writes it."""
    kind = _kind(p)
    if kind == "choice":
        kind = " \\| ".join(f'"{c}"' for c in p.type.choices)  # type: ignore[attr-defined]
    return f"list of {kind}" if getattr(p, "multiple", False) or p.nargs != 1 else kind


# --- effective settings -------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """A JSON/TOML-friendly form of a click value: paths as strings, tuples as lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items())}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def effective_settings(ctx: click.Context) -> dict[str, dict[str, Any]]:
    """Every spec key with its effective value and where it came from."""
    out: dict[str, dict[str, Any]] = {}
    for key, p in spec_keys(ctx.command).items():
        assert p.name is not None
        src = ctx.get_parameter_source(p.name)
        source = SOURCE_NAMES.get(src, str(src)) if src is not None else "default"
        if src == ParameterSource.DEFAULT_MAP and ctx.params.get("config"):
            source = f"spec file {ctx.params['config']}"
        out[key] = {"value": jsonable(ctx.params.get(p.name)), "source": source}
    return out


def _tomlable(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str)) or (isinstance(v, list) and all(_tomlable(x) for x in v))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are valid TOML basic-string escapes
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


def render_toml(settings: Mapping[str, Mapping[str, Any]], command: str) -> str:
    """The effective settings as a spec file that ``--config`` reads back to the same settings."""
    lines = [f"# effective settings of `trtconv {command}`; the comment says where each came from"]
    width = max((len(k) for k in settings), default=0)
    for key, item in settings.items():
        value, source = item["value"], item["source"]
        if value is None:
            lines.append(f"# {key} is not set ({source})")
        elif _tomlable(value):
            lines.append(f"{key.ljust(width)} = {_toml_value(value)}  # {source}")
        else:
            lines.append(f"# {key} = {value!r} ({source}; not expressible in TOML)")
    return "\n".join(lines) + "\n"


def print_effective(ctx: click.Context, *, as_json: bool) -> None:

    settings = effective_settings(ctx)
    if as_json:
        print_json({
            "command": ctx.command.name,
            "settings": {k: v["value"] for k, v in settings.items()},
            "sources": {k: v["source"] for k, v in settings.items()},
        })
    else:
        sys.stdout.write(render_toml(settings, ctx.command.name or ""))
        sys.stdout.flush()


def config_option(f: F) -> F:
    """Add ``--config SPEC.toml`` and ``--print-config`` to a command function (below @click.command)."""

    @functools.wraps(f)
    def wrapper(*args: Any, config: Path | None = None, print_config: bool = False, **kwargs: Any) -> Any:
        if print_config:
            ctx = click.get_current_context()
            print_effective(ctx, as_json=bool(ctx.params.get("as_json")))
            return None
        return f(*args, **kwargs)

    wrapper = click.option(
        "--print-config", is_flag=True,
        help="Print the effective settings (TOML; JSON with --json), each with where it came from, and exit.",
    )(wrapper)
    wrapper = click.option(
        "--config", type=click.Path(path_type=Path, dir_okay=False), is_eager=True,
        callback=_load_spec_callback, metavar="SPEC.toml",
        help="Read settings from a TOML spec file (keys = long flag names; docs/config.md). "
             "Flags on the command line win over the file.",
    )(wrapper)
    return wrapper  # type: ignore[return-value]
