"""Stage 4, precision: FP16 and INT8 made explicit in the ONNX (TensorRT 11 has no builder flags for them)."""

from trtconv.precision.fp16 import (
    DEFAULT_MAX_ACTIVATION,
    Fp16AccuracyError,
    Fp16Report,
    Fp16Settings,
    convert_fp16,
    rule_summaries,
)
from trtconv.precision.fp16_rules import (
    FP16_MAX,
)
from trtconv.precision.int8 import (
    DEFAULT_TRT_VERSION,
    REMAINDER_FP16,
    Int8AccuracyError,
    Int8Report,
    Int8Result,
    Int8Settings,
    Int8ShareError,
    cache_files,
    parts_line,
    quantize_int8,
    samples_needed,
    too_few_samples,
)
from trtconv.precision.phases import (
    LONG_PHASES,
    PHASES,
)

__all__ = [
    "DEFAULT_MAX_ACTIVATION",
    "DEFAULT_TRT_VERSION",
    "FP16_MAX",
    "LONG_PHASES",
    "PHASES",
    "REMAINDER_FP16",
    "Fp16AccuracyError",
    "Fp16Report",
    "Fp16Settings",
    "Int8AccuracyError",
    "Int8Report",
    "Int8Result",
    "Int8Settings",
    "Int8ShareError",
    "cache_files",
    "convert_fp16",
    "parts_line",
    "quantize_int8",
    "samples_needed",
    "too_few_samples",
    "rule_summaries",
]
