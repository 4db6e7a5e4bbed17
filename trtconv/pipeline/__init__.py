"""Layer pipeline: the only place that composes several stages (quantize, build); the API and CLI call it."""

from trtconv.pipeline.build import (
    BuildOutcome,
    BuildRequest,
    run_build,
)
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
    "not_the_input",
    "quantize",
    "run_build",
]
