"""What the precision passes' progress stages are called in a log or under a bar.

``convert_fp16`` and ``quantize_int8`` report ``progress(stage, done, total)`` with these
stage keys; ``trtconv quantize`` and the build pipeline show the same words for them.
"""

from __future__ import annotations

PHASES: dict[str, str] = {
    "fold": "folding BatchNormalization into Conv",
    "peaks": "measuring activation ranges",
    "convert": "converting to FP16",
    "calibrate": "calibrating",
    "accuracy": "checking accuracy with ONNX Runtime",
    "locate": "finding where the FP16 error starts",
    "choose-calibration": "choosing the calibration on the selection samples",
    "smoothing": "trying smoothing on the selection samples",
    "bias-correction": "trying bias correction on the selection samples",
    "sensitivity": "measuring each layer's error on the selection samples",
    "auto-exclude": "keeping the fewest layers out of INT8",
    "judge": "judging the result on the held-out samples",
}
LONG_PHASES = ("peaks", "calibrate", "accuracy")  # the ones that run the model once per sample
