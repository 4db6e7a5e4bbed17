"""trtconv: ONNX to TensorRT in one command, and the truth about the result.

The pipeline as Python functions (docs/api.md)::

    import trtconv
    report = trtconv.check("model.onnx", trt="10.16")
    trtconv.quantize("model.onnx", "model.fp16.onnx", trtconv.QuantizeSettings(precision="fp16"))

``import trtconv`` stays light: the names below are imported on first use (PEP 562), and
nothing imported here touches TensorRT; only ``trtconv.trt`` does.

``trtconv.rewrite`` and ``trtconv.build`` are also the names of stage subpackages. So that
both ``trtconv.rewrite(...)`` and ``trtconv.rewrite.RewriteSettings`` work whatever was
imported first, those two packages are made callable when they are attached to this
package; calling one calls :func:`trtconv.api.rewrite` / :func:`trtconv.api.build`. Static
type checkers see modules there: typed code imports the functions from ``trtconv.api``.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "check": "trtconv.api",
    "quantize": "trtconv.api",
    "CheckReport": "trtconv.analyze",
    "RewriteSettings": "trtconv.rewrite",
    "RewriteResult": "trtconv.rewrite",
    "QuantizeSettings": "trtconv.api",
    "QuantizeResult": "trtconv.api",
    "QuantizeAccuracyError": "trtconv.api",
    "BuildSettings": "trtconv.api",
    "BuildOutcome": "trtconv.build.pipeline",
    "Thresholds": "trtconv.verify.compare",
    "ExitCode": "trtconv.errors",
    "TrtconvError": "trtconv.errors",
}
_CALLABLE_STAGES = frozenset({"rewrite", "build"})

__all__ = sorted([*_EXPORTS, *_CALLABLE_STAGES, "__version__"])


class _CallableStage(types.ModuleType):
    """A stage subpackage that is also its pipeline function (``trtconv.rewrite(...)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        api = importlib.import_module("trtconv.api")
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # The import system attaches each imported subpackage here with setattr.
        if name in _CALLABLE_STAGES and type(value) is types.ModuleType:
            value.__class__ = _CallableStage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _CALLABLE_STAGES:
        return importlib.import_module(f"trtconv.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'trtconv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
