"""Layer pipeline: the only place that composes several stages (check, rewrite, quantize, build); the API and
CLI call it. ``BuildSettings`` is what ``build`` was asked; the plan and the stage settings are functions of it."""

from trtconv.pipeline.build import build
from trtconv.pipeline.build_identity import gpu_properties, request_identity
from trtconv.pipeline.build_record import BuildOutcome
from trtconv.pipeline.build_settings import (
    PLUGIN_FREE_DCN,
    BuildSettings,
    parse_byte_size,
    quantize_settings,
    rewrite_settings,
)
from trtconv.pipeline.check import check
from trtconv.pipeline.quantize import (
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    gate_thresholds,
    quantize,
)
from trtconv.pipeline.rewrite import rewrite

__all__ = [
    "PLUGIN_FREE_DCN",
    "BuildOutcome",
    "BuildSettings",
    "QuantizeAccuracyError",
    "QuantizeResult",
    "QuantizeSettings",
    "build",
    "check",
    "gate_thresholds",
    "gpu_properties",
    "parse_byte_size",
    "quantize",
    "quantize_settings",
    "rewrite",
    "rewrite_settings",
    "request_identity",
]
