"""INT8 made explicit: calibrate on real samples, place Q/DQ, gate the result against FP32.

The front door: what ``quantize``/``build`` and the benchmarks call. The stages behind it, one
module each: ``parameters`` (what is asked) -> ``prepare`` (opset upgrade, BatchNorm fold) ->
``calibration`` (cache or samples -> scales; ``calibrators``: the histogram searches) -> ``qdq``
(placement) -> ``candidate`` (Q/DQ and the FP16 remainder) -> ``choice``/``per_tensor``/``bias``/
``smooth`` (method ``auto``'s parts) -> ``gate`` (accuracy, ``sensitivity``, auto-exclude);
``compose`` runs them and holds the report.
"""

from trtconv.precision.int8.accuracy import accuracy_report
from trtconv.precision.int8.calib_cache import cache_files
from trtconv.precision.int8.claim import CLAIM_CONFIDENCE, CLAIM_SHARE, samples_needed
from trtconv.precision.int8.compose import (
    Int8AccuracyError,
    Int8EvidenceError,
    Int8Report,
    Int8Result,
    Int8ShareError,
    quantize_int8,
)
from trtconv.precision.int8.gate import in_int8, int8_layers, int8_layers_written
from trtconv.precision.int8.parameters import DEFAULT_TRT_VERSION, REMAINDER_FP16, Int8Settings
from trtconv.precision.int8.prepare import upgrade_opset
from trtconv.precision.int8.report import parts_line, too_few_samples

__all__ = [
    "CLAIM_CONFIDENCE",
    "CLAIM_SHARE",
    "DEFAULT_TRT_VERSION",
    "REMAINDER_FP16",
    "Int8AccuracyError",
    "Int8EvidenceError",
    "Int8Report",
    "Int8Result",
    "Int8Settings",
    "Int8ShareError",
    "accuracy_report",
    "cache_files",
    "in_int8",
    "int8_layers",
    "int8_layers_written",
    "parts_line",
    "quantize_int8",
    "samples_needed",
    "too_few_samples",
    "upgrade_opset",
]
