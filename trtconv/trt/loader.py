"""Importing TensorRT: one place that turns "not installed" into a clear, documented error."""

from __future__ import annotations

import functools

from trtconv.errors import BackendUnavailableError
from trtconv.trt.environment import INSTALL_HINT


@functools.cache
def tensorrt_version() -> str:
    """Import tensorrt (once) and return its version; BackendUnavailableError if it cannot load."""
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or OSError when libnvinfer is missing
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendUnavailableError(f"TensorRT is not available: {first}", hint=INSTALL_HINT) from None
    return str(trt.__version__)


def major_version() -> int:
    return int(tensorrt_version().split(".")[0])
