"""``trtconv inspect ENGINE``: an engine's layers with their precisions, I/O, profiles and provenance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from trtconv.api import dims_text, inspect_engine
from trtconv.cli.options import json_option
from trtconv.cli.output import print_json

NO_FLOAT = "no float tensor"  # a layer whose inputs and outputs are all integer or bool (shape arithmetic)


def _tensors(tensors: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(f"{t.get('name')}:{t.get('dtype') or '?'}" for t in tensors)


def off_precision_lines(off: list[Mapping[str, Any]], requested: str | None, shown: int = 20) -> list[str]:
    """`build --layers` and `inspect`: the layers that missed the asked precision, with the reason."""
    if not off:
        return [f"every typed compute layer runs in {requested} or narrower"] if requested else []
    lines = [f"{len(off)} compute layer(s) not in {requested}:"]
    for row in off[:shown]:
        reason = row.get("reason") or "no trtconv decision recorded (TensorRT chose the type, or the graph fixes it)"
        lines.append(f"  {row['name']} ({row['type']}): {row['precision']} - {reason}")
    if len(off) > shown:
        lines.append(f"  ... and {len(off) - shown} more (--json lists all)")
    return lines


def _print(report: Mapping[str, Any], all_layers: bool) -> None:
    req = report["requires"]
    echo = click.echo
    echo(f"engine: {report['engine']}")
    ccs = req.get("compute_capabilities") or ([req["compute_capability"]] if req.get("compute_capability") else [])
    echo(f"needs: {req['tensorrt_flavour']} {req.get('tensorrt') or '(version unknown: no manifest)'}"
         + (" (version-compatible)" if req.get("version_compatible") else "")
         + (f", compute capability {' '.join(ccs)}" if ccs else "")
         + (f", plugins {', '.join(req['plugins'])}" if req.get("plugins") else ""))
    for b in report["bindings"]:
        echo(f"{b['mode']:>6} {b['name']}: {b['dtype']} {dims_text(b['shape'])}")
    for i, profile in enumerate(report["profiles"]):
        for name, rng in profile.items():
            echo(f"profile {i} {name}: min {dims_text(rng['min'])} opt {dims_text(rng['opt'])} max {dims_text(rng['max'])}")
    for i, values in enumerate(report.get("shape_input_values") or []):
        for name, rng in values.items():
            echo(f"profile {i} {name} (shape tensor) values: min {rng['min']} opt {rng['opt']} max {rng['max']}")
    layers = report["layers"]
    echo(f"layers: {layers['count']} ({layers['from']}: {layers['note']})")
    counts: dict[str, int] = {}
    for row in layers["rows"]:
        if row.get("compute"):
            label = row.get("precision") or NO_FLOAT
            counts[label] = counts.get(label, 0) + 1
    echo("compute layers by precision: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if all_layers:
        for row in layers["rows"]:
            echo(f"  {row['name']} [{row['type']}] {row['precision'] or '-'}: "
                 f"{_tensors(row['inputs'])} -> {_tensors(row['outputs'])}")
    prov = report.get("provenance")
    if prov:
        src = prov.get("source") or {}
        echo(f"built from {src.get('onnx') or 'an ONNX not recorded'} (sha256 {str(src.get('onnx_sha256') or '?')[:12]}) "
             f"by trtconv {prov.get('trtconv') or '?'} at {prov.get('created_at') or '?'}; "
             f"identity {str(prov.get('identity') or '?')[:12]}")
        requested = (prov.get("precision") or {}).get("requested")
        for line in off_precision_lines(report["off_precision"], requested if requested != "fp32" else None):
            echo(line)


@click.command("inspect")
@click.argument("engine", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--plugins", "plugins", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Plugin library the engine needs (TensorRT 10/11; repeatable).")
@click.option("--layers", "all_layers", is_flag=True, help="List every layer with its tensors' types.")
@json_option
def inspect(engine: Path, plugins: tuple[Path, ...], all_layers: bool, as_json: bool) -> None:
    """Show ENGINE's layers and their precisions, its I/O and profiles, what it needs, where it came from.

    Read from the engine where TensorRT and a GPU can deserialize it; otherwise from the layer
    table its manifest (ENGINE.json) recorded at build time, said as such. Exit 3: the engine does
    not match its manifest's identity; 9: nothing here can describe it.
    """
    report = inspect_engine(engine, tuple(plugins))
    if as_json:
        print_json(report)
        return
    _print(report, all_layers)
