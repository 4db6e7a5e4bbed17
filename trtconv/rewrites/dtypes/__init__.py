"""Rules about types TensorRT refuses or changes: one rule per module.

* :mod:`.uint8_input`: a uint8 input moved through layout ops before its ``Cast`` (an NHWC image
  transposed to NCHW) -> the ``Cast`` first, the layout ops in float; the engine keeps the uint8 input;

float64 is narrowed by the framework itself (:mod:`trtconv.rewrites.dtype_narrowing`, a step before
every rule, reported with the clean-ups and as ``dtype_changes``).
"""

from trtconv.rewrites.dtypes.uint8_input import Uint8InputRule
from trtconv.rewrites.rule import RuleFamily

FAMILY = RuleFamily("dtypes", (Uint8InputRule(),))

__all__ = ["FAMILY", "Uint8InputRule"]
