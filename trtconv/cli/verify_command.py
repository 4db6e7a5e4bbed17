"""``trtconv verify``: an engine against ONNX Runtime on the same inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from trtconv.api import (
    VerifyReport,
    gate_thresholds,
    manifest_path,
    parse_shapes,
    read_manifest,
    verify_engine,
)
from trtconv.cli.options import (
    GATE_LIMITS,
    engine_trt_option,
    json_option,
    merge_deprecated,
    options_for,
    shapes_option,
)
from trtconv.cli.output import finish, print_json, stdout_console
from trtconv.cli.precision_report import one_value_note
from trtconv.errors import ExitCode, UsageError


def engine_precision(engine: Path, given: str | None) -> str:
    """--precision, else the manifest's requested precision, else fp32."""
    if given:
        return given

    path = manifest_path(engine)
    if path.is_file():
        return str(read_manifest(path).get("precision", {}).get("requested") or "fp32")
    return "fp32"


def print_report(report: VerifyReport) -> None:
    console = stdout_console()
    table = Table()
    for col in ("output", "shape", "max abs", "mean abs", "max rel", "cosine", "NaN/Inf"):
        table.add_column(col)
    for s in report.stats:
        table.add_row(s.name, "x".join(map(str, s.shape)), f"{s.max_abs:.3g}", f"{s.mean_abs:.3g}",
                      f"{s.max_rel:.3g}", f"{s.cosine:.6f}", str(s.nonfinite))
    console.print(table)
    note = one_value_note(report.stats, "ONNX Runtime")
    if note:
        console.print(note, markup=False)
    if report.passed:
        console.print("[green]PASS[/]: every output within the thresholds")
    else:
        console.print("[red]FAIL[/]:")
        for f in report.failures:
            console.print(f"  - {f}", markup=False)


@click.command("verify")
@click.argument("engine", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The reference ONNX (run on ONNX Runtime, CPU).")
@click.option("--inputs", "inputs", multiple=True, type=click.Path(path_type=Path),
              help=".npz of input arrays keyed by input name; repeat it, or give a folder of .npy/.npz files or one "
                   ".npz of many samples (000/x, 001/x, ...), to verify on all of them (default: seeded random inputs).")
@shapes_option
@click.option("--precision", type=click.Choice(["fp32", "fp16", "int8"]),
              help="Default thresholds for this precision (default: from model.engine.json, else fp32).")
@options_for("verify", *GATE_LIMITS)
@click.option("--plugins", "plugins", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Plugin library the engine needs (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@engine_trt_option
@json_option
def verify(engine: Path, onnx_path: Path, inputs: tuple[Path, ...], shapes: str | None, precision: str | None,
           plugins: tuple[Path, ...], seed: int, trt: str | None, as_json: bool, **limits: Any) -> None:
    """Run ENGINE and the ONNX on the same inputs and compare every output.

    Exit 0: within the thresholds; 7: outside; 11: bad --inputs; 9: TensorRT or GPU missing.
    The limits are the other commands' (--max-abs/--max-rel; --atol/--rtol are deprecated spellings).
    Dynamic dims not in --shapes take profile 0's opt shape (manifest, else the engine).
    """

    if not engine.is_file():
        raise UsageError(f"{engine}: no such file")
    limits = merge_deprecated(limits)
    thresholds = gate_thresholds(engine_precision(engine, precision), limits)
    report = verify_engine(engine, onnx_path, inputs=list(inputs) or None, shapes=parse_shapes(shapes), thresholds=thresholds,
                           plugin_libraries=tuple(plugins), seed=seed, top1=bool(limits.get("min_top1")),
                           target=trt)
    if as_json:
        print_json(report.to_json())
    else:
        print_report(report)
    if not report.passed:
        finish(ExitCode.ACCURACY)
