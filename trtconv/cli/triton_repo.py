"""``trtconv triton-repo`` and ``build --triton-repo``: engines into a Triton model repository."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from trtconv.api import PlanSource, inspect_engine, model_name, write_repository
from trtconv.cli.options import force_option
from trtconv.outputs import check_output_dir

F = TypeVar("F", bound=Callable[..., Any])


def plan_source(engine: Path, plugins: tuple[Path, ...] = ()) -> PlanSource:
    """An engine's bindings, profiles and compute capabilities (live, else from its manifest);
    its identity is checked on the way (``inspect``'s refusal)."""
    report = inspect_engine(engine, plugins)
    req = report["requires"]
    ccs = req.get("compute_capabilities") or ([req["compute_capability"]] if req.get("compute_capability") else [])
    shape_inputs = sorted({name for values in report.get("shape_input_values") or [] for name in values})
    return PlanSource(engine, report["bindings"], report["profiles"], tuple(str(c) for c in ccs),
                      flavour=str(req.get("tensorrt_flavour") or "TensorRT"), shape_inputs=tuple(shape_inputs))


def write_engines(repo: Path, engines: Sequence[Path], name: str | None, force: bool) -> Path:
    check_output_dir(repo, flag="-o")
    sources = [plan_source(Path(e)) for e in engines]
    return write_repository(repo, name or model_name(Path(engines[0])), sources, force=force)


def triton_repo_option(f: F) -> F:
    """Add ``--triton-repo DIR`` to ``build``: after a successful build (or a cache hit), the engine
    goes into ``DIR/<engine name>/`` with its ``config.pbtxt``. A TensorRT-RTX target, and a DIR that
    cannot be written, are refused before any work (``build_command``'s output check)."""

    @functools.wraps(f)
    def wrapper(*args: Any, triton_repo: Path | None = None, **kwargs: Any) -> Any:
        result = f(*args, **kwargs)
        params = click.get_current_context().params
        engine = Path(params["output"])
        if triton_repo is not None and not params.get("prepare_only") and engine.is_file():
            model_dir = write_engines(triton_repo, [engine], None, force=True)
            click.echo(f"Triton model written to {model_dir}", err=True)
        return result

    return click.option("--triton-repo", type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
                        help="Also write the engine into a Triton model repository: DIR/<name>/config.pbtxt "
                        "and DIR/<name>/1/model.plan (TensorRT 10/11 targets: Triton cannot load TensorRT-RTX plans, "
                        "refused before any work).")(wrapper)  # type: ignore[return-value]


@click.command("triton-repo")
@click.argument("engines", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("-o", "--output", "repo", required=True, type=click.Path(path_type=Path, file_okay=False),
              metavar="DIR", help="The model repository folder (created if missing).")
@click.option("--name", help="The Triton model name (default: the first engine's file name without .engine).")
@force_option
def triton_repo(engines: tuple[Path, ...], repo: Path, name: str | None, force: bool) -> None:
    """Gather ENGINES (the same model built for different GPUs) into one Triton model.

    Writes DIR/NAME/config.pbtxt (platform tensorrt_plan, inputs/outputs with Triton types and
    dims, max_batch_size, profiles) and DIR/NAME/1/: model.plan for one engine, else one plan per
    engine with cc_model_filenames mapping each compute capability (from the manifests) to its plan.
    """
    model_dir = write_engines(repo, list(engines), name, force)
    click.echo(f"Triton model written to {model_dir} ({len(engines)} plan(s))")
