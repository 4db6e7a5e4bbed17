"""``trtconv doctor``: which TensorRT, CUDA, driver and GPU this machine offers, and what is missing."""

from __future__ import annotations

import click
from rich.table import Table

from trtconv import __version__
from trtconv.api import Environment, TensorRTStatus, probe, problems
from trtconv.cli.options import json_option
from trtconv.cli.output import finish, print_json, stdout_console
from trtconv.errors import ExitCode


@click.command("doctor")
@json_option
def doctor(as_json: bool) -> None:
    """Show what TensorRT work this machine can do, and what to install for the rest.

    Exit 0: TensorRT imports and a usable GPU is visible (build, verify and bench can run),
    or TensorRT-RTX imports (`build --trt rtx` needs no GPU); 9: neither (what is missing is
    listed with what to do). Without either, check, rewrite, quantize and `build
    --prepare-only` still work.
    """

    env = probe()
    issues = problems(env)
    can_build = env.tensorrt.importable and bool(env.gpus) and not env.driver_error
    can_build_rtx = env.tensorrt_rtx.importable
    if as_json:
        print_json({
            "trtconv": __version__,
            "environment": env.to_json(),
            "problems": [{"problem": p, "fix": fix} for p, fix in issues],
            "can_build": can_build,
            "can_build_rtx": can_build_rtx,
        })
    else:
        _print_human(env, issues, can_build, can_build_rtx)
    if not (can_build or can_build_rtx):
        finish(ExitCode.TENSORRT_UNAVAILABLE)


def _status_text(status: TensorRTStatus) -> str:
    text = (status.version or "?") if status.importable else f"[red]missing[/] ({status.error})"
    if status.distributions:
        text += "  [dim](" + ", ".join(f"{k} {v}" for k, v in sorted(status.distributions.items())) + ")[/]"
    return text


def _print_human(env: Environment, issues: list[tuple[str, str]], can_build: bool, can_build_rtx: bool) -> None:
    console = stdout_console()
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("TensorRT", _status_text(env.tensorrt))
    table.add_row("TensorRT-RTX", _status_text(env.tensorrt_rtx))
    table.add_row("NVIDIA driver", env.driver or ("[red]none[/]" if env.driver_error else "unknown"))
    table.add_row("CUDA (driver)", env.cuda_driver or "[red]none[/]")
    table.add_row("CUDA runtime", env.cuda_runtime or "not found (libcudart)")
    if env.gpus:
        for g in env.gpus:
            mem = f", {g.memory_bytes / 2**30:.0f} GiB" if g.memory_bytes else ""
            table.add_row(f"GPU {g.index}", f"{g.name} (compute capability {g.compute_capability}{mem})")
    else:
        table.add_row("GPU", f"[red]none[/] ({env.driver_error or 'no device visible'})")
    for name, version in sorted(env.packages.items()):
        if version:
            table.add_row(name, version)
    console.print(table)
    if issues:
        console.print("\n[bold]missing[/]")
        for problem, fix in issues:
            console.print(f"  - {problem}", markup=False)
            console.print(f"    fix: {fix}", markup=False)
    if can_build_rtx:
        console.print("\n[green]ready[/]: trtconv build --trt rtx builds TensorRT-RTX engines here (no GPU needed; "
                      "they run on RTX GPUs of the compute capabilities built for)")
    if can_build:
        console.print("\n[green]ready[/]: trtconv build, verify and bench can run here")
    else:
        lacking = " and ".join(x for x, ok in (("TensorRT", env.tensorrt.importable), ("a GPU", bool(env.gpus)))
                               if not ok) or "the items above"
        console.print(f"\nwithout {lacking}: check, rewrite, quantize and build --prepare-only work here; "
                      "build, verify and bench need the items above", markup=False)
