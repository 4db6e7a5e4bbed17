"""Layer pipeline: the only place that composes several stages (quantize, build); the API and CLI call it."""

from trtconv.pipeline.build import (
    BuildOutcome,
    BuildRequest,
    run_build,
)
from trtconv.pipeline.build_identity import gpu_properties, request_identity
from trtconv.pipeline.quantize import (
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    not_the_input,
    quantize,
)

__all__ = [
    "BuildOutcome",
    "BuildRequest",
    "QuantizeAccuracyError",
    "QuantizeResult",
    "QuantizeSettings",
    "gpu_properties",
    "not_the_input",
    "quantize",
    "request_identity",
    "run_build",
]
