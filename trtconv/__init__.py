"""trtconv: ONNX to TensorRT in one command, and the truth about the result.

The pipeline as Python functions (docs/api.md)::

    import trtconv
    report = trtconv.check("model.onnx", trt="10.16")
    trtconv.quantize("model.onnx", "model.fp16.onnx", trtconv.QuantizeSettings(precision="fp16"))

``import trtconv`` stays light: the names below are imported on first use (PEP 562), and
nothing imported here touches TensorRT; only ``trtconv.trt`` does. No subpackage shares a
name with a function here (the rewrite stage is ``trtconv.rewrites``, the build plan
``trtconv.plan``), so ``trtconv.rewrite`` and ``trtconv.build`` are plain functions.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "check": "trtconv.api",
    "rewrite": "trtconv.api",
    "quantize": "trtconv.api",
    "build": "trtconv.api",
    "CheckReport": "trtconv.analyze",
    "RewriteSettings": "trtconv.rewrites",
    "RewriteResult": "trtconv.rewrites",
    "QuantizeSettings": "trtconv.api",
    "QuantizeResult": "trtconv.api",
    "QuantizeAccuracyError": "trtconv.api",
    "BuildSettings": "trtconv.api",
    "BuildOutcome": "trtconv.pipeline",
    "Thresholds": "trtconv.reference",
    "ExitCode": "trtconv.errors",
    "TrtconvError": "trtconv.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'trtconv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
