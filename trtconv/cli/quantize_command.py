"""``trtconv quantize``: FP16 or INT8 made explicit in the ONNX, checked with ONNX Runtime.

TensorRT 11 has no precision flags, so precision lives in the model: this command
writes that model. The work is :func:`trtconv.api.quantize` (over
:func:`trtconv.precision.fp16.convert_fp16` and :func:`trtconv.precision.int8.quantize_int8`);
this module turns flags into its settings and its report into text or JSON.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from trtconv import api
from trtconv.api import LONG_PHASES, PHASES, large_weights, quantize_settings, return_large_blocks
from trtconv.cli.cache import cache_option
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.html_report import record, report_option
from trtconv.cli.options import (
    exclude_options,
    force_option,
    fp16_options,
    gate_options,
    int8_options,
    json_option,
    model_argument,
    option,
    options_for,
    output_option,
    sample_options,
    shapes_hint_runs,
    shapes_option,
)
from trtconv.cli.output import Heartbeat, interactive, progress, warn, warn_int8_only
from trtconv.cli.precision_report import emit_quantize
from trtconv.errors import AccuracyError, PrecisionNotAchievedError


@click.command("quantize")
@model_argument
@output_option(help="Output ONNX file (written atomically; weights beside it as <name>.data when large).")
@option("precision", choices=("fp16", "int8"), required=True, help="Target precision.")
@sample_options
@shapes_option
@exclude_options
@fp16_options
@int8_options
@options_for("quantize", "min_precision_share",
             help={"min_precision_share": "int8 auto-exclusion (on unless --no-auto-exclude): keep at least this share of Conv/MatMul/Gemm layers "
                   "in INT8, and stop (exit 8) as soon as the gate cannot pass within it (as build)."})
@gate_options
@force_option
@json_option
@config_option
@report_option
@deps_option()
@cache_option()
@shapes_hint_runs
def quantize(model: Path, output: Path, precision: str, force: bool, as_json: bool, **params: Any) -> None:
    """Write MODEL in FP16 or INT8 as explicit ONNX (what TensorRT 10 and 11 build from).

    \b
    fp16: converts to FP16, keeping in FP32 what would overflow or lose too much
          (each kept node is listed with the rule that kept it).
    int8: calibrates on --calib-data, inserts Q/DQ nodes, the rest in FP16.
    With sample data both models run in ONNX Runtime and the error per output is gated
    (int8: cosine >= 0.99 on held-out samples, fp16: >= 0.999, unless --min-cosine etc.);
    a failure exits 7, names the worst layers and writes nothing.
    """

    settings = quantize_settings(precision, params)
    if precision == "fp16":
        warn_int8_only(params)
    if large_weights(model):  # freed weights and activations leave the RSS (issue 20's memory bound); below that
        return_large_blocks()  # size glibc's reuse of freed blocks saves the page faults (docs/benchmarks.md)
    bar = _Progress()
    bar.say(f"quantizing {model} to {precision}")
    doc: dict[str, Any] = {"model": str(model), "output": str(output)}
    try:
        with quiet_random_samples(precision, settings.random_data), Heartbeat("quantize"):
            result = api.quantize(model, output, settings, force=force, progress=bar.update, warn=warn)
    except (AccuracyError, PrecisionNotAchievedError) as exc:
        bar.close()
        failed = getattr(exc, "result", None)
        if failed is not None:  # the numbers behind the refusal: per-layer sensitivity, the share needed
            doc.update(failed.to_json())
            doc["error"] = {"exit_code": int(exc.exit_code), "name": exc.exit_code.name, "message": exc.message,
                            "hint": exc.hint}
            record("gate", doc)
            emit_quantize(doc, as_json)
        raise
    finally:
        bar.close()
    doc.update(result.to_json())
    doc["output"] = str(output)
    record("gate", doc)
    emit_quantize(doc, as_json)


@contextlib.contextmanager
def quiet_random_samples(precision: str, random_data: int | None) -> Iterator[None]:
    """fp16 and fp32 (a build's profile) read random samples several times: one warning in their words instead
    of the loader's INT8-worded one each time."""
    if precision == "int8" or not random_data:
        yield
        return
    warn(f"using {random_data} RANDOM sample(s): activation ranges and errors will not reflect real inputs; "
         "use this only to smoke-test")
    logger = logging.getLogger("trtconv.samples.sources")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="calibrating on RANDOM data", category=UserWarning)
            yield
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------- output


class _Progress:
    """Stage lines on stderr (not with -q); a bar per stage on an interactive terminal."""

    def __init__(self) -> None:
        self.quiet = logging.getLogger("trtconv").getEffectiveLevel() > logging.WARNING
        self.stage: str | None = None
        self.bar: Any = None
        self.task: Any = None

    def say(self, text: str) -> None:
        if not self.quiet:
            click.echo(f"trtconv: {text}", err=True)

    def update(self, stage: str, done: int, total: int | None) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            label = PHASES.get(stage, stage)
            if not self.quiet and stage in LONG_PHASES:
                # a bar on a terminal; in a pipe, the bar's plain lines (one now, one every few seconds)
                if interactive(sys.stderr):
                    self.say(label)
                self.bar = progress()
                self.bar.start()
                self.task = self.bar.add_task(label, total=total)
            else:
                self.say(label)
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar = None
        self.task = None
