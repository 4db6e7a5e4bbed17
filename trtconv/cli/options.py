"""Reusable click options, defined once so every command spells a flag the same way.

The vocabulary follows trtexec where it has a word for the thing (--shapes,
--min-shapes/--opt-shapes/--max-shapes, --plugins).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

TRT_VERSIONS = ("10.16", "11.4", "rtx")  # "rtx": TensorRT-RTX (builds without a GPU)
DEFAULT_TRT_VERSION = "11.4"


def model_argument(f: F) -> F:
    return click.argument("model", type=click.Path(path_type=Path, dir_okay=False))(f)


def output_option(required: bool = True, help: str = "Output file.") -> Callable[[F], F]:
    return click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
                        required=required, help=help)


def force_option(f: F) -> F:
    return click.option("--force", is_flag=True, help="Overwrite existing output files.")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print a machine-readable report on stdout (schema in docs/cli.md).")(f)


def shapes_option(f: F) -> F:
    return click.option("--shapes", metavar="NAME:DxD,...",
                        help="Static shapes for dynamic inputs, e.g. images:1x3x640x640.")(f)


def trt_version_option(f: F) -> F:
    return click.option("--trt", "trt_version", type=click.Choice(TRT_VERSIONS), default=DEFAULT_TRT_VERSION,
                        show_default=True, help="Target TensorRT version, or rtx for TensorRT-RTX.")(f)
