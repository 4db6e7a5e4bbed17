"""What every family generator of benchmarks/build_coverage.py hands the driver: one generated model.

Kept free of heavy imports so the torchvision child interpreter never needs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Generated:
    """One model of the coverage set: where it was written, or why it could not be."""

    family: str
    name: str
    path: Path | None  # None: the generator failed (``error`` says why)
    error: str = ""
    # the example input shapes; the driver passes those of dynamic inputs as ``--shapes``
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = field(default_factory=tuple)
    detector: bool = False  # runs with the split flag where trtconv has one
    # the values of shape-tensor inputs (TensorRT needs them in a profile): given to both builds
    values: tuple[tuple[str, tuple[int, ...]], ...] = field(default_factory=tuple)


def first_line(exc: BaseException, width: int = 90) -> str:
    """The first line of an exception's message, short enough for a table cell."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:width]}"
