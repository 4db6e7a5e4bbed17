"""Reusable click options, defined once so every command spells a flag the same way.

The vocabulary follows trtexec where it has a word for the thing (--shapes,
--min-shapes/--opt-shapes/--max-shapes, --plugins).
"""

from __future__ import annotations

import functools
import logging
import math
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from trtconv.api import (
    RULE_NAMES,
    default_target,
    disk_bytes,
    fixed_shapes_hint,
    load_model,
    parse_limit,
    target_name,
)
from trtconv.cli.command_line import without_flag
from trtconv.cli.main import JSON_KEY, MODEL_BYTES_KEY, MODEL_KEY
from trtconv.cli.output import warn
from trtconv.errors import ShapesNeeded, TrtconvError
from trtconv.settings import INT8_ONLY, Setting, declared, for_command

F = TypeVar("F", bound=Callable[..., Any])



def _remember_model(ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """The model's path, for the out-of-memory message (``ctx.meta`` is shared by the whole command)."""
    ctx.meta[MODEL_KEY] = value
    ctx.meta[MODEL_BYTES_KEY] = None if value is None else functools.partial(disk_bytes, value)
    return value


def model_argument(f: F) -> F:
    return click.argument("model", type=click.Path(path_type=Path, dir_okay=False), callback=_remember_model)(f)


def output_option(required: bool = True, help: str = "Output file.") -> Callable[[F], F]:
    return click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
                        required=required, help=help)


def force_option(f: F) -> F:
    return click.option("--force", is_flag=True, help="Overwrite existing output files.")(f)


def _remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_KEY] = True
    return value


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, callback=_remember_json,
                        help="Print a machine-readable report on stdout (schema in docs/cli.md); on failure, "
                        "a JSON error object at least.")(f)


def _compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


class LimitType(click.ParamType):
    """``X`` or ``OUTPUT=X``; a spec file may write a bare number (``min-cosine = 0.999``)."""

    name = "limit"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)  # a spec file's bare number
        text = repr(float(value)) if numeric else str(value)
        try:
            _, number = parse_limit(text)
        except ValueError:
            self.fail(f"{text!r}: expected a number or OUTPUT=NUMBER (e.g. 0.995 or scores=0.995)", param, ctx)
        lo, hi, what = _LIMIT_RANGES.get(param.name if param else "", (0.0, math.inf, "a tolerance"))
        if not lo <= number <= hi:  # a limit nothing can meet, or (NaN) one nothing can be compared with
            span = f"at most {hi:g}" if number > hi else f"at least {lo:g}" if number < lo else "a number"
            self.fail(f"{text!r}: {what} is {span}", param, ctx)
        return text


# What each gate limit measures, and the values it can take (a limit outside them can never be met).
_LIMIT_RANGES = {
    "min_cosine": (-1.0, 1.0, "a cosine"),
    "min_top1": (0.0, 1.0, "a top-1 agreement (a share of samples)"),
}


LIMIT = LimitType()

def _warn_deprecated(new: str, old: tuple[str, ...]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        # click >= 8.3 records the source only after the callback: None here is the command line too
        source = ctx.get_parameter_source(param.name or "")
        if value not in (None, ()) and source in (None, ParameterSource.COMMANDLINE):
            warn(f"{'/'.join(old)} is deprecated: use {new} (the old spelling goes in the next release)")
        return value
    return callback


def _click_type(s: Setting, choices: tuple[str, ...] | None) -> Any:
    if s.type == "choice":
        return click.Choice(choices or s.choices)
    if s.type == "path":
        return click.Path(path_type=Path, dir_okay=s.name in DIR_OK)
    if s.type == "limit":
        return LIMIT
    if s.type in ("int", "float") and s.range is not None:
        lo, hi = s.range
        return click.IntRange(lo, hi) if s.type == "int" else click.FloatRange(lo, hi)  # type: ignore[arg-type]
    return {"int": int, "float": float}.get(s.type)


DIR_OK = frozenset({"calib_data"})  # path settings that may name a folder
# help that names what only a lower layer knows (the settings tree imports nothing of trtconv)
_HELP_EXTRA = {"skip_rule": f" Rules: {', '.join(RULE_NAMES)}."}


def option(name: str, *, choices: tuple[str, ...] | None = None, help: str | None = None,
           deprecated: bool = False, required: bool = False) -> Callable[[F], F]:
    """The click option of a declared setting (trtconv.settings): flag, aliases, type, default and help.

    ``required``: the command has no default for it (``quantize --precision``).

    ``deprecated``: the setting's old spellings (``verify --atol``) become a hidden option of their
    own whose value :func:`merge_deprecated` folds in, printing a one-line warning when used.
    """

    s = declared(name)
    text = help or s.help + _HELP_EXTRA.get(name, "")
    if s.type == "bool" and s.secondary:
        decls = [f"{s.flag}/{s.secondary}", name]
        opt = click.option(*decls, default=s.default, show_default=s.show_default, help=text)
    elif s.type == "bool":
        opt = click.option(s.flag, *s.aliases, name, is_flag=True, help=text)
    else:
        # a required option gets no default at all (click >= 8.3 counts an explicit None as given)
        default: dict[str, Any] = {"required": True} if required else {"default": () if s.multiple else s.default}
        opt = click.option(s.flag, *s.aliases, name, type=_click_type(s, choices), multiple=s.multiple,
                           metavar=s.metavar, show_default=s.show_default and default.get("default") not in (None, ()),
                           help=text, **default)
    if not (deprecated and s.deprecated):
        return opt
    old = click.option(*s.deprecated, f"{name}_deprecated", type=_click_type(s, choices), multiple=s.multiple,
                       hidden=True, expose_value=True, callback=_warn_deprecated(s.flag, s.deprecated))
    return _compose(opt, old)


def merge_deprecated(params: dict[str, Any]) -> dict[str, Any]:
    """Fold the hidden old spellings' values (``max_abs_deprecated``) into their setting's."""
    out = dict(params)
    for key in [k for k in params if k.endswith("_deprecated")]:
        value = out.pop(key)
        name = key[: -len("_deprecated")]
        if value not in (None, ()):
            out[name] = tuple(out.get(name) or ()) + tuple(value if isinstance(value, tuple) else (value,))
    return out


def options_for(command: str, *names: str, choices: Mapping[str, tuple[str, ...]] | None = None,
                help: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """Every declared setting of ``command`` (or just ``names``), in declaration order."""
    chosen = [s.name for s in for_command(command) if not names or s.name in names]
    return _compose(*(option(n, choices=(choices or {}).get(n), help=(help or {}).get(n),
                             deprecated=command == "verify") for n in chosen))


shapes_option = option("shapes")
trt_option = option("trt")
# verify/bench: which runtime the engine needs, when neither its manifest nor its header says
engine_trt_option = option("trt", help="The TensorRT the engine was built with, or rtx for TensorRT-RTX (default: "
                           "from ENGINE.json, else the engine's header, else TensorRT).")
sample_options = options_for("quantize", "calib_data", "preprocess", "calib_loader", "random_data", "max_samples",
                             "held_out", "sources", "split_seed")
exclude_options = options_for("quantize", "exclude", "exclude_op")
fp16_options = options_for("quantize", "keep_io_types", "max_activation", "max_initializer", "no_fold_batchnorm")
int8_options = options_for("quantize", *INT8_ONLY)
gate_options = options_for("quantize", "max_abs", "max_rel", "min_cosine", "min_top1", "gate_output",
                           "allow_nonfinite")


def target_or_default(trt: str | None, quiet: bool = False) -> str:
    """``--trt`` as given, else the TensorRT that is installed, announced in one stderr line."""
    if trt is not None:
        return trt
    target, why = default_target()
    announce_target(target, why, quiet=quiet)
    return target


def announce_target(target: str, why: str, *, quiet: bool = False) -> None:
    """The one stderr line that says which TensorRT a command without --trt targets, and why."""
    if not quiet and logging.getLogger("trtconv").isEnabledFor(logging.WARNING):
        click.echo(f"trtconv: target: {target_name(target)} ({why}; --trt picks another)", err=True)


GATE_LIMITS = ("max_abs", "max_rel", "min_cosine", "min_top1")


def shapes_hint_runs(f: F) -> F:
    """A command whose inputs can need one shape each (``--random-data``): where one has dynamic dims and no
    shape (:class:`~trtconv.errors.ShapesNeeded`), the hint becomes the command as it was typed with a
    ``--shapes`` its graph runs at (a batch of 1; other sizes said to be placeholders), keeping a ``--shapes``
    it gave: a hint that runs as printed."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except ShapesNeeded as exc:
            ctx = click.get_current_context()
            words = getattr(ctx.find_root().command, "words", None)
            model = ctx.meta.get(MODEL_KEY)
            if words and isinstance(model, Path):
                exc.hint = _shapes_command(list(words), model, exc) or exc.hint
            raise

    return cast(F, wrapper)


def _shapes_command(words: list[str], model: Path, exc: ShapesNeeded) -> str | None:
    words, given = without_flag(words, "--shapes")
    try:
        proto = load_model(model).proto
    except TrtconvError:
        return None
    return fixed_shapes_hint(proto, exc.dims, shlex.join(["trtconv", *words]), given)
