"""Layer reference: ONNX Runtime as the CPU reference every stage compares against, and output comparison."""

from trtconv.reference import ort
from trtconv.reference.class_axes import class_axes
from trtconv.reference.compare import (
    DEFAULT_THRESHOLDS,
    ONE_VALUE_MEASURE,
    OutputStats,
    PooledStats,
    Thresholds,
    compare_arrays,
    compare_outputs,
    dot,
    one_value,
    one_value_cosines,
    parse_limit,
    pooled_cosine,
    thresholds_with,
    violations,
    violations_line,
    worse_stats,
)
from trtconv.reference.ort import (
    random_feeds,
    run,
    session,
)

__all__ = [
    "DEFAULT_THRESHOLDS",
    "ONE_VALUE_MEASURE",
    "OutputStats",
    "PooledStats",
    "Thresholds",
    "class_axes",
    "compare_arrays",
    "compare_outputs",
    "dot",
    "one_value",
    "one_value_cosines",
    "parse_limit",
    "pooled_cosine",
    "ort",  # the ONNX Runtime adapter as a namespace: ort.session, ort.run, ort.Feeds, ...
    "random_feeds",
    "run",
    "session",
    "thresholds_with",
    "violations",
    "violations_line",
    "worse_stats",
]
