"""Importing TensorRT: one place that turns "not installed" into a clear, documented error.

``trt`` is the active flavour's module (``tensorrt`` or ``tensorrt_rtx``, see
``trtconv.trt.flavour``), imported on first attribute access. Modules of this package
write ``if TYPE_CHECKING: import tensorrt as trt`` / ``else: from trtconv.trt.loader
import trt``, so mypy checks every call against the real bindings of each flavour
(``make typecheck-trt`` generates a ``tensorrt`` stub package per flavour) while the
code runs against whichever flavour the build targets.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any

from trtconv.errors import BackendUnavailableError
from trtconv.trt.environment import unavailable_hint
from trtconv.trt.flavour import Flavour, current


@functools.cache
def _import(flavour: Flavour) -> ModuleType:
    try:
        return importlib.import_module(flavour.module)
    except Exception as exc:  # ImportError, or OSError when the native libraries are missing
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailableError(f"{flavour.name} is not available: {first}",
                                      hint=unavailable_hint(flavour)) from None


def forget() -> None:
    """Import again on next use (for tests that hide a flavour's module)."""
    _import.cache_clear()


def module(flavour: Flavour | None = None) -> ModuleType:
    """The flavour's Python module (default: the active one); BackendUnavailableError if it cannot load."""
    return _import(flavour or current())


def tensorrt_version(flavour: Flavour | None = None) -> str:
    """Import the flavour's module (once) and return its version."""
    return str(module(flavour).__version__)


def major_version(flavour: Flavour | None = None) -> int:
    return int(tensorrt_version(flavour).split(".")[0])


class _ActiveModule:
    """``trt.X`` is ``X`` of the active flavour's module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(module(), name)


trt: Any = _ActiveModule()
__all__ = ["forget", "module", "tensorrt_version", "major_version", "trt"]
