"""``trtconv check``: what the target TensorRT parser will reject, per node, before any GPU is touched."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from trtconv import api
from trtconv.api import CheckReport, default_target, dims_text, qualified_op, target_name
from trtconv.cli.html_report import record, report_option
from trtconv.cli.options import announce_target, json_option, model_argument, shapes_option, trt_option
from trtconv.cli.output import cell_lines, finish, print_json, stdout_console

STATUS_STYLE = {"supported": "green", "rewritable": "yellow", "plugin": "yellow", "unsupported": "red"}


@click.command("check")
@model_argument
@trt_option
@shapes_option
@json_option
@report_option
@click.option("--live", is_flag=True,
              help="Also run the real ONNX parser (and, for --trt rtx, a CPU-only build) where that TensorRT is "
                   "installed, and show both answers per node.")
def check(model: Path, trt: str | None, shapes: str | None, as_json: bool, live: bool) -> None:
    """Say which nodes TensorRT's ONNX parser will reject, why, and what trtconv can rewrite.

    Exit 0: all supported; 4: every rejected node is rewritable or needs a plugin;
    5: some node is unsupported; 3: invalid model. With --live and a TensorRT installed,
    0 means TensorRT itself accepted (and built) the model.
    """
    default = None if trt else default_target()
    report = api.check(model, trt=default[0] if default else trt, shapes=shapes, live=live)
    if default is not None:  # after the model was read: an invalid model gets its error alone
        announce_target(*default, quiet=as_json)
    record("check", report.to_json())
    if as_json:
        print_json(report.to_json())
    else:
        _print_human(report)
    if report.exit_code:
        finish(report.exit_code)


def summary_line(report: CheckReport) -> str:
    c = report.counts
    dyn = [i for i in report.inputs if i.dynamic]
    uncovered = [i.name for i in dyn if not i.covered]
    parts = [
        f"{report.node_count} nodes: {c.get('supported', 0)} supported, {c.get('rewritable', 0)} rewritable, "
        f"{c.get('plugin', 0)} need a plugin, {c.get('unsupported', 0)} unsupported",
        f"{report.warning_count} warning{'' if report.warning_count == 1 else 's'}",
    ]
    if dyn:
        parts.append(f"{len(dyn)} dynamic input{'' if len(dyn) == 1 else 's'} "
                     f"({len(uncovered)} not covered by --shapes)")
    if report.folded is not None:
        parts.append(f"refused as it is; folded with these --shapes (`build --shapes` folds it itself): {report.folded}")
    line = f"{target_name(report.target)}: {report.verdict.upper()} - " + "; ".join(parts)
    if report.live is not None and report.exit_code != report.predicted_exit_code:  # the word is the prediction's
        line += f"; TensorRT itself {'refused' if report.exit_code else 'accepted'} it (exit {int(report.exit_code)})"
    return line


def _print_human(report: CheckReport) -> None:
    console = stdout_console()
    console.print(f"[bold]{escape(report.model)}[/bold] against {target_name(report.target)}")
    if report.nodes:
        table = Table(show_lines=False, expand=False)
        for col in ("node", "op", "status", "reason"):
            table.add_column(col, overflow="fold")
        for n in report.nodes:
            reasons = cell_lines([f"{'' if f.severity == 'error' else 'warning: '}{f.message}" for f in n.findings])
            status = n.status + (f" ({n.rewrite})" if n.rewrite else "")
            op = qualified_op(n.domain, n.op_type)
            table.add_row(escape(n.path), escape(op), f"[{STATUS_STYLE[n.status]}]{escape(status)}[/]", escape(reasons))
        console.print(table)
        hints = {f.rule: f.hint for n in report.nodes for f in n.findings if f.hint}
        for rule, hint in hints.items():
            console.print(f"hint ({rule}): {hint}", markup=False)
    dynamic = [i for i in report.inputs if i.dynamic]
    if dynamic:
        inputs = Table(title="dynamic inputs (need an optimization profile)")
        for col in ("input", "dims", "--shapes"):
            inputs.add_column(col)
        for i in dynamic:
            dims = dims_text(i.dims)
            given = "x".join(map(str, i.shape)) if i.shape else "[red]not given[/]"
            inputs.add_row(escape(i.name), escape(dims), given)
        console.print(inputs)
    for w in report.warnings:
        console.print(f"note: {w}", markup=False)
    if report.live is not None:
        _print_live(console, report)
    console.print(summary_line(report), markup=False)


def _print_live(console, report: CheckReport) -> None:
    live = report.live
    assert live is not None
    build = {None: "not attempted", "ok": "built", "fail": "build failed"}[live.build]
    console.print(f"live: {live.tensorrt}: parser {live.parse}s, {build}; predicted parse {live.predicted_parse}, "
                  f"build {live.predicted_build}: {'AGREES' if live.agrees else 'DISAGREES'}", markup=False)
    if live.nodes:
        table = Table(title="prediction vs the real parser")
        for col in ("node", "op", "check", "parser", ""):
            table.add_column(col, overflow="fold")
        for n in live.nodes:
            mark = {True: "", False: "[red]differs[/]", None: "[dim]?[/]"}[n.agrees]
            table.add_row(escape(n.path), escape(n.op_type), escape(n.predicted), escape(n.parser), mark)
        console.print(table)
    for err in live.build_errors[-2:]:
        console.print(f"live build error: {err}", markup=False)
    if live.failing_node:
        console.print(f"live build: {live.failing_node}", markup=False)
    if live.build == "fail" and live.build_judged is None:
        console.print(f"note: the live build failed at placeholder shapes (the dynamic dims of "
                      f"{', '.join(live.placeholder_inputs)} taken as 1, as no --shapes gave them), which says nothing "
                      "of the model: not counted; give --shapes with your sizes to have TensorRT build it", markup=False)
