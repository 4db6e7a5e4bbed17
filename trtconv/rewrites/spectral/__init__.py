"""Rules for signal-processing ops the target cannot parse: one rule per module.

* :mod:`.dft`: ``DFT`` (TensorRT-RTX and TensorRT 10 have none) -> one ``MatMul`` by the transform's
  cosine/sine matrix, for those targets only (TensorRT 11.2.1 imports ``DFT`` as a cuFFT plugin).
"""

from trtconv.rewrites.rule import RuleFamily
from trtconv.rewrites.spectral.dft import DftRule

FAMILY = RuleFamily("spectral", (DftRule(),))

__all__ = ["FAMILY", "DftRule"]
