"""``trtconv rewrite``: make a model parseable by TensorRT, every rewrite proven numerically."""

from __future__ import annotations

from pathlib import Path

import click

from trtconv.api import rewrite as api_rewrite
from trtconv.cli.cache import cache_option
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.html_report import record, report_option
from trtconv.cli.options import (
    force_option,
    json_option,
    model_argument,
    output_option,
    shapes_option,
    skip_rule_option,
)
from trtconv.cli.output import Heartbeat, print_json, progress, stdout_console
from trtconv.errors import UsageError
from trtconv.load import parse_shapes
from trtconv.rewrites import (
    DCN_TARGETS,
    DEFAULT_FOLD_LIMIT,
    NODE_RTOL,
    RewriteSettings,
    load_plugin_map,
    trtconv_plugin_spec,
)


def _size(text: str) -> int:
    """``16MiB``, ``500k``, ``1048576`` → bytes."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "kmg" else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise UsageError(f"bad size {text!r}", hint="write bytes, or a number with k/M/G, e.g. 16M") from None
    if value < 0:
        raise UsageError(f"bad size {text!r}: negative")
    return value


@click.command("rewrite")
@model_argument
@output_option(help="Rewritten ONNX (weights go to <name>.data beside it when the model is large "
                    "or came with external data).")
@force_option
@json_option
@shapes_option
@click.option("--dcn-target", type=click.Choice(DCN_TARGETS), default="deformconv", show_default=True,
              help="What DCNv2 nodes become: standard ONNX DeformConv (TensorRT >= 10.1 imports it), "
                   "TensorRT's ModulatedDeformConv2d v2 plugin node, trtconv's own DCNv2 plugin node, or "
                   "portable: standard ops only (GridSample + 1x1 Conv; no plugin, e.g. TensorRT-RTX).")
@click.option("--dcn-plugin-spec", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Spec of trtconv's DCNv2 plugin (for --dcn-target trtconv-plugin); "
                   "default: the spec shipped inside trtconv (trtconv/rewrites/dcn/dcnv2_spec.json).")
@click.option("--plugin-map", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="YAML map from custom ops to plugin nodes (format in docs/rewrite.md).")
@skip_rule_option
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Prove every rewrite in ONNX Runtime against a float64 reference, and the whole graph.")
@click.option("--fold/--no-fold", "fold", default=True, show_default=True, help="Fold constant subgraphs.")
@click.option("--fold-limit", default=f"{DEFAULT_FOLD_LIMIT >> 20}M", show_default=True,
              help="Largest tensor constant folding may create (bytes, or with k/M/G).")
@click.option("--int32/--no-int32", "int32", default=True, show_default=True,
              help="Narrow INT64 initializers to INT32 where every consumer accepts INT32 and values fit.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random proof inputs.")
@click.option("--tolerance", type=float, default=NODE_RTOL, show_default=True,
              help="Node proofs pass when max |error| <= tolerance * max(1, max |reference|).")
@config_option
@report_option
@deps_option()
@cache_option()
def rewrite(model: Path, output: Path, force: bool, as_json: bool, shapes: str | None, dcn_target: str,
            dcn_plugin_spec: Path | None, plugin_map: Path | None, skip_rules: tuple[str, ...], verify: bool,
            fold: bool, fold_limit: str,
            int32: bool, seed: int, tolerance: float) -> None:
    """Turn nodes TensorRT cannot parse into nodes it can, and clean the graph up.

    Exit 0: written; 7: a proof failed (nothing written); 2: bad flags or plugin map;
    3: invalid model; 5: a node cannot be rewritten.
    """
    shape_map = parse_shapes(shapes)
    limit = _size(fold_limit)
    pmap = load_plugin_map(plugin_map) if plugin_map else None
    spec = trtconv_plugin_spec(dcn_plugin_spec) if dcn_target == "trtconv-plugin" else None
    settings = RewriteSettings(
        dcn_target=dcn_target, dcn_plugin=spec, plugin_map=pmap, shapes=shape_map, fold_constants=fold,
        fold_size_limit=limit, int64_to_int32=int32, verify=verify, seed=seed,
        node_tolerance=tolerance, skip_rules=frozenset(skip_rules),
    )
    with progress() as bar, Heartbeat("rewrite"):
        task = bar.add_task("rewrite", total=3)
        result = api_rewrite(model, output, settings, force=force, step=lambda _stage: bar.advance(task))
    doc = result.report.to_json()
    doc["input"] = str(model)
    doc["output"] = str(output)
    record("rewrite", doc)
    if as_json:
        print_json(doc)
    else:
        console = stdout_console()
        console.print(f"{model} -> {output}", markup=False)
        console.print(result.report.to_text(), markup=False)
