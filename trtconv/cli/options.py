"""Reusable click options, defined once so every command spells a flag the same way.

The vocabulary follows trtexec where it has a word for the thing (--shapes,
--min-shapes/--opt-shapes/--max-shapes, --plugins).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from trtconv.api import QuantizeSettings
from trtconv.cli.main import JSON_KEY, MODEL_BYTES_KEY, MODEL_KEY
from trtconv.errors import UsageError
from trtconv.load import disk_bytes, parse_shapes
from trtconv.reference import DEFAULT_THRESHOLDS, Thresholds, parse_limit, thresholds_with
from trtconv.rewrites import RULE_NAMES

F = TypeVar("F", bound=Callable[..., Any])

TRT_VERSIONS = ("10.16", "11.4", "rtx")  # "rtx": TensorRT-RTX (builds without a GPU)
DEFAULT_TRT_VERSION = "11.4"


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


def shapes_option(f: F) -> F:
    return click.option("--shapes", metavar="NAME:DxD,...",
                        help="Static shapes for dynamic inputs, e.g. images:1x3x640x640.")(f)


def skip_rule_option(f: F) -> F:
    """``--skip-rule NAME`` (repeatable): a built-in rewrite rule not to apply. A plain string:
    rewrite's settings check refuses an unknown name (exit 2) and lists the rules."""
    return click.option("--skip-rule", "skip_rules", multiple=True, metavar="NAME",
                        help="Do not apply this built-in rewrite rule (repeatable); its nodes stay as they are. "
                             f"Rules: {', '.join(RULE_NAMES)}.")(f)


def trt_version_option(f: F) -> F:
    return click.option("--trt", "trt_version", type=click.Choice(TRT_VERSIONS), default=DEFAULT_TRT_VERSION,
                        show_default=True, help="Target TensorRT version, or rtx for TensorRT-RTX.")(f)


def command_line(ctx: click.Context, *, drop: tuple[str, ...] = ()) -> str:
    """The command as the user ran it, rebuilt from its parsed parameters (every option that is
    not at its default, spec-file values included), for hints that must run as printed. ``drop``:
    parameter names left out (the ones the hint itself supplies)."""
    parts = ["trtconv", ctx.info_name or ctx.command.name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name in drop or value is None or value == () or value is False and param.default in (None, False):
            continue
        if isinstance(param, click.Argument):
            parts.append(shlex.quote(str(value)))
            continue
        if not isinstance(param, click.Option) or value == param.default:
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            if value is True:
                parts.append(flag)
            elif param.secondary_opts:  # --no-x for a flag that defaults to on
                parts.append(max(param.secondary_opts, key=len))
            continue
        for item in value if param.multiple else (value,):
            parts += [flag, shlex.quote(str(item))]
    return " ".join(parts)


def engine_trt_option(f: F) -> F:
    """verify/bench: which runtime the engine needs, when neither its manifest nor its header says."""
    return click.option("--trt", "trt_version", type=click.Choice(TRT_VERSIONS), default=None,
                        help="The TensorRT the engine was built with, or rtx for TensorRT-RTX (default: from "
                        "ENGINE.json, else the engine's header, else TensorRT).")(f)


def _compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


# --------------------------------------------------------------------------- precision (quantize and build)
# ``quantize`` and ``build --precision int8|fp16`` take the same sample, INT8, exclusion and gate
# flags; they are defined here once and turned into QuantizeSettings by ``quantize_settings``.

sample_options = _compose(
    click.option("--calib-data", type=click.Path(path_type=Path), metavar="PATH",
                 help="Sample data: a folder (or file) of .npy/.npz samples, one .npz holding many "
                      "(000/images, 001/images, ...), or a folder of images. int8: calibration; fp16: activation "
                      "ranges. Both: the accuracy gate."),
    click.option("--preprocess", metavar="SPEC",
                 help="Image preprocessing, e.g. preset=ppocr-det or size=224x224,order=bgr,mean=0.5/0.5/0.5,"
                      "std=0.5/0.5/0.5,scale=1/255,layout=nchw (presets: ppocr-det, ppocr-rec, ppocr-cls, imagenet, "
                      "yolo)."),
    click.option("--calib-loader", type=click.Path(path_type=Path), metavar="FILE.py",
                 help="Python file defining samples(inputs) that yields dicts of input name -> array. Runs your code."),
    click.option("--random-data", type=click.IntRange(min=1), metavar="N",
                 help="Use N seeded random samples (smoke tests only: real data gives real ranges; "
                      "the gate then says 'not checked')."),
    click.option("--max-samples", "--calib-limit", "max_samples", type=click.IntRange(min=0), default=0,
                 show_default=True, help="Use at most this many samples (0: all)."),
    click.option("--held-out", metavar="N|FRACTION",
                 help="int8: keep the last N samples (or this fraction) out of calibration for the accuracy gate "
                      "[default: 0.2 when there are >= 5 samples]."),
)

int8_options = _compose(
    click.option("--calib-method", type=click.Choice(["entropy", "percentile", "minmax", "mse", "auto"]),
                 default="entropy", show_default=True,
                 help="int8: how activation ranges are chosen from the calibration data (auto: try entropy, "
                      "percentile 99.9/99.99/99.999, minmax and mse, keep the one most accurate on the held-out data)."),
    click.option("--percentile", type=click.FloatRange(50.0, 100.0), default=99.99, show_default=True,
                 help="int8: the percentile for --calib-method percentile."),
    click.option("--calib-cache", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
                 help="int8: read scales from / write scales to this calibration cache."),
    click.option("--no-calib-cache", is_flag=True, help="int8: ignore --calib-cache (recalibrate)."),
    click.option("--int8-remainder", type=click.Choice(["fp16", "fp32"]), default="fp16", show_default=True,
                 help="int8: the precision of everything outside the Q/DQ pairs (fp16 under the FP16 overflow rules)."),
    click.option("--auto-exclude", is_flag=True,
                 help="int8: when the gate fails, keep the fewest layers out of INT8 until it passes (named in the "
                      "report)."),
    click.option("--sensitivity", is_flag=True,
                 help="int8: report the error each quantized layer adds on the held-out data (always done when the "
                      "gate fails)."),
)

exclude_options = _compose(
    click.option("--exclude", "exclude", multiple=True, metavar="PATTERN",
                 help="Keep nodes whose name matches this glob out of the precision change (int8: also op types; "
                      "they take the remainder precision); repeatable, comma-separated."),
    click.option("--exclude-op", "exclude_op", multiple=True, metavar="OP",
                 help="Keep every node of this op type out of the precision change; repeatable, comma-separated."),
)

class LimitType(click.ParamType):
    """``X`` or ``OUTPUT=X``; a spec file may write a bare number (``min-cosine = 0.999``)."""

    name = "limit"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return repr(float(value))
        text = str(value)
        try:
            parse_limit(text)
        except ValueError:
            self.fail(f"{text!r}: expected a number or OUTPUT=NUMBER (e.g. 0.995 or scores=0.995)", param, ctx)
        return text


LIMIT = LimitType()

gate_options = _compose(
    click.option("--max-abs", multiple=True, type=LIMIT, metavar="[OUTPUT=]X",
                 help="Fail (exit 7) if an output's max abs error exceeds X; OUTPUT=X for one output. Repeatable."),
    click.option("--max-rel", multiple=True, type=LIMIT, metavar="[OUTPUT=]X",
                 help="Fail (exit 7) if an output's max rel error exceeds X; OUTPUT=X for one output. Repeatable."),
    click.option("--min-cosine", multiple=True, type=LIMIT, metavar="[OUTPUT=]X",
                 help="Fail (exit 7) if an output's cosine similarity is below X [default: int8 0.99, fp16 0.999]; "
                      "OUTPUT=X for one output (e.g. scores=0.995). Repeatable."),
    click.option("--min-top1", multiple=True, type=LIMIT, metavar="[OUTPUT=]X",
                 help="Fail (exit 7) if the top-1 agreement of a classifier-like output is below X. Repeatable."),
    click.option("--gate-output", "gate_outputs", multiple=True, metavar="OUTPUT",
                 help="Gate only these outputs (the others are still reported); repeatable, comma-separated."),
    click.option("--allow-nonfinite", is_flag=True, help="Do not fail when the quantized model outputs NaN/Inf."),
)

GATE_FLAGS = ("max_abs", "max_rel", "min_cosine", "min_top1")


def _held_out(value: str | None) -> int | float | None:
    if value is None:
        return None
    try:
        return float(value) if "." in value else int(value)
    except ValueError as exc:
        raise UsageError(f"--held-out {value!r} is not a count or a fraction", hint="e.g. --held-out 10 or 0.2") \
            from exc


def _limits(flag: str, values: tuple[str, ...]) -> list[tuple[str | None, float]]:
    out = []
    for v in values:
        try:
            out.append(parse_limit(v))
        except ValueError as exc:
            raise UsageError(f"--{flag.replace('_', '-')} {v!r}: expected a number or OUTPUT=NUMBER",
                             hint="e.g. --min-cosine 0.995 or --min-cosine scores=0.995") from exc
    return out


def gate_thresholds(precision: str, params: Mapping[str, Any]) -> Thresholds:
    """The gate the flags ask for: the precision's defaults with the given limits on top."""
    overrides = {k: _limits(k, tuple(params.get(k) or ())) for k in GATE_FLAGS}
    only = [p.strip() for v in params.get("gate_outputs") or () for p in v.split(",") if p.strip()]
    return thresholds_with(DEFAULT_THRESHOLDS[precision], overrides,
                           allow_nonfinite=bool(params.get("allow_nonfinite")), only=only)


def quantize_settings(precision: str, params: Mapping[str, Any]) -> QuantizeSettings:
    """QuantizeSettings from the shared precision flags (``quantize``'s and ``build``'s click params)."""
    get = params.get
    return QuantizeSettings(
        precision=precision,  # type: ignore[arg-type]
        calib_data=get("calib_data"), preprocess=get("preprocess"), calib_loader=get("calib_loader"),
        random_data=get("random_data"), max_samples=get("max_samples") or 0, held_out=_held_out(get("held_out")),
        shapes=parse_shapes(get("shapes")),
        exclude=tuple(get("exclude") or ()), exclude_op=tuple(get("exclude_op") or ()),
        keep_io_types=get("keep_io_types", True), max_activation=get("max_activation"),
        max_initializer=get("max_initializer"), fold_batchnorm=not get("no_fold_batchnorm", False),
        calib_method=get("calib_method") or "entropy", percentile=get("percentile") or 99.99,
        calib_cache=get("calib_cache"), use_calib_cache=not get("no_calib_cache", False),
        thresholds=gate_thresholds(precision, params),
        int8_remainder=get("int8_remainder") or "fp16", auto_exclude=bool(get("auto_exclude")),
        sensitivity=bool(get("sensitivity")),
        **({} if get("min_precision_share") is None else {"min_precision_share": get("min_precision_share")}),
    )
