"""Rules for detectors' post-processing on targets that cannot run it: one rule per module.

* :mod:`.roi_align`: ``RoiAlign`` (TensorRT-RTX imports it through a plugin it lacks) -> a
  plugin-free form of standard ops (:mod:`.roi_corners`: gathered bilinear corners, then a mean
  or a max, as ONNX Runtime computes them), for ``--trt rtx`` only.
* :mod:`.loop_concat`: a ``Loop`` growing a carried tensor by ``Concat`` (torchvision's mask
  pasting and keypoint decoding) -> a scan output and a ``Reshape``, for every target (TensorRT's
  recurrence needs one shape in and out).
"""

from trtconv.rewrites.detection.loop_concat import LoopConcatRule
from trtconv.rewrites.detection.roi_align import RoiAlignRule
from trtconv.rewrites.rule import RuleFamily

FAMILY = RuleFamily("detection", (RoiAlignRule(), LoopConcatRule()))

__all__ = ["FAMILY", "LoopConcatRule", "RoiAlignRule"]
