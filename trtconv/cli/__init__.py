"""The command line: a thin click layer over the stage functions."""

from trtconv.cli.main import (
    main,
)

__all__ = [
    "main",
]
