"""``trtconv rewrite``: make a model parseable by TensorRT, every rewrite proven numerically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trtconv import api
from trtconv.api import DCN_TARGETS, rewrite_settings
from trtconv.cli.cache import cache_option
from trtconv.cli.config import config_option
from trtconv.cli.depfile import deps_option
from trtconv.cli.html_report import record, report_option
from trtconv.cli.options import force_option, json_option, model_argument, options_for, output_option
from trtconv.cli.output import Heartbeat, print_json, progress, stdout_console
from trtconv.settings import declared

REWRITE_TRT_HELP = ("Rewrite for this TensorRT (a version, or rtx for TensorRT-RTX) as build does: rules made for "
                    "some targets only apply too (DFT for rtx and 10.x, RoiAlign for rtx), and DCNv2 becomes the "
                    "plugin-free form where the target loads no plugins [default: none: the rules every TensorRT "
                    "needs].")


@click.command("rewrite")
@model_argument
@output_option(help="Rewritten ONNX (weights go to <name>.data beside it when the model is large "
                    "or came with external data).")
@force_option
@json_option
@options_for("rewrite", choices={"dcn_target": DCN_TARGETS},
             help={"dcn_target": declared("dcn_target").help.replace("build's default: portable for --trt rtx, else "
                                                                    "deformconv.", "[default: portable for --trt rtx, "
                                                                    "else deformconv]"),
                   "trt": REWRITE_TRT_HELP})
@config_option
@report_option
@deps_option()
@cache_option()
def rewrite(model: Path, output: Path, force: bool, as_json: bool, **params: Any) -> None:
    """Turn nodes TensorRT cannot parse into nodes it can, and clean the graph up.

    Exit 0: written; 7: a proof failed (nothing written); 2: bad flags or plugin map;
    3: invalid model; 5: a node cannot be rewritten.
    """
    settings = rewrite_settings(params, target=params.get("trt"))
    with progress() as bar, Heartbeat("rewrite"):
        task = bar.add_task("rewrite", total=3)
        result = api.rewrite(model, output, settings, force=force, step=lambda _stage: bar.advance(task))
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
