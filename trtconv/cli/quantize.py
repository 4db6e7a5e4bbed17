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
from rich.table import Table

from trtconv.api import QuantizeResult, QuantizeSettings
from trtconv.api import quantize as run_quantize
from trtconv.cli.cache import cache_option
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.options import force_option, json_option, model_argument, output_option, shapes_option
from trtconv.cli.output import interactive, print_json, progress, stdout_console, warn
from trtconv.errors import AccuracyError, UsageError
from trtconv.load import parse_shapes
from trtconv.pipeline.quantize import INT8_DEFAULT_HELD_OUT, INT8_MIN_FOR_HOLDOUT
from trtconv.precision.fp16 import rule_summaries
from trtconv.precision.phases import LONG_PHASES, PHASES
from trtconv.reference.compare import OutputStats, Thresholds


@click.command("quantize")
@model_argument
@output_option(help="Output ONNX file (written atomically; weights beside it as <name>.data when large).")
@click.option("--precision", type=click.Choice(["fp16", "int8"]), required=True, help="Target precision.")
@click.option("--calib-data", type=click.Path(path_type=Path), metavar="PATH",
              help="Sample data: a folder (or file) of .npy/.npz samples, or of images. "
                   "int8: calibration; fp16: activation ranges. Both: the accuracy check.")
@click.option("--preprocess", metavar="SPEC",
              help="Image preprocessing, e.g. preset=ppocr-det or size=224x224,order=bgr,mean=0.5/0.5/0.5,"
                   "std=0.5/0.5/0.5,scale=1/255,layout=nchw (presets: ppocr-det, ppocr-rec, ppocr-cls, imagenet).")
@click.option("--calib-loader", type=click.Path(path_type=Path), metavar="FILE.py",
              help="Python file defining samples(inputs) that yields dicts of input name -> array. Runs your code.")
@click.option("--random-data", type=click.IntRange(min=1), metavar="N",
              help="Use N seeded random samples (smoke tests only: real data gives real ranges).")
@click.option("--max-samples", "--calib-limit", "max_samples", type=click.IntRange(min=0), default=0,
              show_default=True,
              help="Use at most this many samples (0: all).")
@click.option("--held-out", metavar="N|FRACTION",
              help="int8: keep the last N samples (or this fraction) out of calibration for the accuracy check "
                   f"[default: {INT8_DEFAULT_HELD_OUT} when there are >= {INT8_MIN_FOR_HOLDOUT} samples].")
@shapes_option
@click.option("--exclude", "exclude", multiple=True, metavar="PATTERN",
              help="Keep nodes whose name matches this glob in FP32 (int8: also op types); repeatable, comma-separated.")
@click.option("--exclude-op", "exclude_op", multiple=True, metavar="OP",
              help="Keep every node of this op type in FP32; repeatable, comma-separated.")
@click.option("--keep-io-types/--fp16-io", default=True, show_default=True,
              help="fp16: keep the model's float32 inputs and outputs (Casts at the edges), or make them float16.")
@click.option("--max-activation", type=float, default=None, metavar="X",
              help="fp16: keep nodes whose tensors exceed |X| on the sample data in FP32 [default: 4096; 0: off].")
@click.option("--max-initializer", type=float, default=None, metavar="X",
              help="fp16: keep nodes whose constants exceed |X| in FP32 [default: 65504; 0: off].")
@click.option("--no-fold-batchnorm", is_flag=True, help="fp16: do not fold BatchNormalization into the Conv before it.")
@click.option("--calib-method", type=click.Choice(["entropy", "percentile", "minmax"]), default="entropy",
              show_default=True, help="int8: how activation ranges are chosen from the calibration data.")
@click.option("--percentile", type=click.FloatRange(50.0, 100.0), default=99.99, show_default=True,
              help="int8: the percentile for --calib-method percentile.")
@click.option("--calib-cache", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="int8: read scales from / write scales to this calibration cache.")
@click.option("--no-calib-cache", is_flag=True, help="int8: ignore --calib-cache (recalibrate).")
@click.option("--max-abs", type=float, help="Fail (exit 7) if any output's max abs error exceeds this.")
@click.option("--max-rel", type=float, help="Fail (exit 7) if any output's max rel error exceeds this.")
@click.option("--min-cosine", type=float, help="Fail (exit 7) if any output's cosine similarity is below this.")
@click.option("--min-top1", type=float, help="Fail (exit 7) if top-1 agreement of a classifier output is below this.")
@click.option("--allow-nonfinite", is_flag=True, help="Do not fail when the quantized model outputs NaN/Inf.")
@force_option
@json_option
@config_option
@deps_option()
@cache_option()
def quantize(
    model: Path, output: Path, precision: str, calib_data: Path | None, preprocess: str | None,
    calib_loader: Path | None, random_data: int | None, max_samples: int, held_out: str | None,
    shapes: str | None, exclude: tuple[str, ...], exclude_op: tuple[str, ...], keep_io_types: bool,
    max_activation: float | None, max_initializer: float | None, no_fold_batchnorm: bool, calib_method: str,
    percentile: float, calib_cache: Path | None, no_calib_cache: bool, max_abs: float | None,
    max_rel: float | None, min_cosine: float | None, min_top1: float | None, allow_nonfinite: bool,
    force: bool, as_json: bool,
) -> None:
    """Write MODEL in FP16 or INT8 as explicit ONNX (what TensorRT 10 and 11 build from).

    \b
    fp16: converts to FP16, keeping in FP32 what would overflow or lose too much
          (each kept node is listed with the rule that kept it).
    int8: calibrates on --calib-data and inserts Q/DQ nodes.
    With sample data, both models run in ONNX Runtime and the error per output is
    reported; thresholds (--max-abs, --min-cosine, ...) fail with exit 7 and write nothing.
    """

    settings = QuantizeSettings(
        precision=precision,  # type: ignore[arg-type]
        calib_data=calib_data, preprocess=preprocess, calib_loader=calib_loader, random_data=random_data,
        max_samples=max_samples, held_out=_held_out(held_out), shapes=parse_shapes(shapes),
        exclude=exclude, exclude_op=exclude_op, keep_io_types=keep_io_types, max_activation=max_activation,
        max_initializer=max_initializer, fold_batchnorm=not no_fold_batchnorm,
        calib_method=calib_method, percentile=percentile,  # type: ignore[arg-type]
        calib_cache=calib_cache, use_calib_cache=not no_calib_cache,
        thresholds=Thresholds(max_abs=max_abs, max_rel=max_rel, min_cosine=min_cosine, min_top1=min_top1,
                              allow_nonfinite=allow_nonfinite),
    )
    bar = _Progress()
    bar.say(f"quantizing {model} to {precision}")
    doc: dict[str, Any] = {"model": str(model), "output": str(output)}
    try:
        with _quiet_random_samples(precision, random_data):
            result = run_quantize(model, output, settings, force=force, progress=bar.update, warn=warn)
    except AccuracyError as exc:
        bar.close()
        failed = getattr(exc, "result", None)
        if failed is not None:
            doc.update(_failed_doc(settings, failed.report))
            _emit(doc, as_json)
        raise
    finally:
        bar.close()
    doc.update(result.to_json())
    doc["output"] = str(output)
    _emit(doc, as_json)


def _held_out(value: str | None) -> int | float | None:
    if value is None:
        return None
    try:
        return float(value) if "." in value else int(value)
    except ValueError as exc:
        raise UsageError(f"--held-out {value!r} is not a count or a fraction", hint="e.g. --held-out 10 or 0.2") \
            from exc


def _failed_doc(settings: Any, report: Any) -> dict[str, Any]:
    """The --json report of a run the accuracy gate stopped: same schema, ``written: false``."""

    return QuantizeResult(None, settings, report, None, getattr(report, "samples", None)).to_json()  # type: ignore[arg-type]


@contextlib.contextmanager
def _quiet_random_samples(precision: str, random_data: int | None) -> Iterator[None]:
    """fp16 reads random samples several times: one FP16-worded warning instead of the loader's INT8 one each time."""
    if precision != "fp16" or not random_data:
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


def _emit(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(doc)
    elif doc["precision"] == "fp16" and doc["fp16"] is not None:
        _print_fp16(doc)
    elif doc["int8"] is not None:
        _print_int8(doc)


def _print_fp16(doc: dict[str, Any]) -> None:

    r = doc["fp16"]
    con = stdout_console()
    con.print(f"{doc['model']} -> {doc['output']} (fp16)", markup=False)
    con.print(f"float nodes: {r['float_nodes']}; converted to FP16: {r['converted']}; kept in FP32: {r['kept_fp32']}; "
              f"casts inserted: {r['casts_inserted']}; BatchNorms folded: {len(r['folded_batchnorms'])}",
              markup=False)
    if r["kept"]:
        summaries = rule_summaries()
        con.print("kept in FP32, by rule:")
        groups: dict[str, list[dict[str, str]]] = {}
        for k in r["kept"]:
            groups.setdefault(k["rule"], []).append(k)
        for rule, nodes in groups.items():
            con.print(f"  {rule} ({len(nodes)}): {summaries.get(rule, '')}", markup=False)
            for k in nodes[:20]:
                where = "" if k["graph"] == "main" else f" in {k['graph']}"
                con.print(f"    {k['name']} ({k['op_type']}){where}: {k['detail']}", markup=False)
            if len(nodes) > 20:
                con.print(f"    ... and {len(nodes) - 20} more (--json lists all)", markup=False)
    if not r["activation_check"]:
        con.print("activation ranges: not measured (no sample data)")
    _print_accuracy(doc, r["samples"])
    _print_verdict(doc)


def _print_int8(doc: dict[str, Any]) -> None:
    r = doc["int8"]
    con = stdout_console()
    con.print(f"{doc['model']} -> {doc['output']} (int8, {r['method']} calibration)", markup=False)
    weights = sum(1 for p in r["placed"] if p["kind"] == "weight")
    acts = sum(1 for p in r["placed"] if p["kind"] == "activation")
    con.print(f"Q/DQ placed: {acts} activations, {weights} weights; nodes skipped: {len(r['skipped'])}; "
              f"calibration runs: {r['calibration_runs']}", markup=False)
    cache = r["cache"]
    if cache.get("path"):
        con.print(f"calibration cache {cache['path']}: {'hit' if cache['hit'] else 'miss'} ({cache['reason']})",
                  markup=False)
    reasons: dict[str, int] = {}
    for s in r["skipped"]:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        con.print(f"  skipped ({n}): {reason}", markup=False)
    _print_accuracy(doc, r["accuracy_samples"])
    _print_verdict(doc)


def _print_accuracy(doc: dict[str, Any], n: int) -> None:
    con = stdout_console()
    if not doc["accuracy"]:
        con.print("accuracy: not checked (no sample data)")
        return
    table = Table(title=f"error against FP32 on {n} sample(s) (ONNX Runtime)")
    stats = [OutputStats(**{**s, "shape": tuple(s["shape"])}) for s in doc["accuracy"]]
    top1 = any(st.top1_agreement is not None for st in stats)
    for col in ("output", "shape", "max abs", "mean abs", "max rel", "cosine", "NaN/Inf") + (("top-1",) if top1 else ()):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right", overflow="fold")
    for st in stats:
        row = [st.name, "x".join(map(str, st.shape)), f"{st.max_abs:.3g}", f"{st.mean_abs:.3g}",
               f"{st.max_rel:.3g}", f"{st.cosine:.6f}", str(st.nonfinite)]
        if top1:
            row.append("-" if st.top1_agreement is None else f"{st.top1_agreement:.4f}")
        table.add_row(*row)
    con.print(table)


def _print_verdict(doc: dict[str, Any]) -> None:
    con = stdout_console()
    if doc["written"]:
        con.print(f"wrote {doc['output']}", markup=False)
    else:
        violations = (doc["fp16"] or doc["int8"] or {}).get("violations", [])
        con.print("FAILED: " + "; ".join(violations) + " - nothing written", markup=False)
