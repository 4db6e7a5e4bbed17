"""What the INT8 stage is asked: its settings and the constants the stages share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from trtconv.precision.fp16 import Fp16Settings
from trtconv.precision.int8.calibrators import Method
from trtconv.reference import DEFAULT_THRESHOLDS, Thresholds
from trtconv.settings import NEWEST_TENSORRT

MIN_QDQ_OPSET = 13  # per-channel DequantizeLinear (axis) needs opset 13
FP16_QDQ_OPSET = 19  # QuantizeLinear/DequantizeLinear take float16 (input, scale, output) from opset 19
DEFAULT_TRT_VERSION = NEWEST_TENSORRT  # the calibration cache header's version when the target has none
Remainder = Literal["fp16", "fp32"]
# The FP16 remainder: the FP16 stage's overflow rules, without its own BN fold (done before Q/DQ)
# and accuracy check (the INT8 gate measures the whole model).
REMAINDER_FP16 = Fp16Settings(fold_batchnorm=False, check_accuracy=False)

# progress(stage, done, total): stage is "calibrate" or "accuracy"; total may be None
ProgressFn = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True)
class Int8Settings:
    """How to quantize. ``thresholds`` fail the run (AccuracyError, exit 7) when accuracy misses them.

    The gate is on by default (cosine >= 0.99 per output, as ``verify`` for INT8 engines).
    ``remainder``: what everything outside the Q/DQ pairs computes in — ``fp16`` (TensorRT 11
    runs a strongly typed network in the types the ONNX gives) under ``fp16``'s overflow rules,
    or ``fp32``.
    """

    method: Method = "entropy"
    percentile: float = 99.99
    exclude: tuple[str, ...] = ()  # fnmatch patterns over node names and op types
    residual_add: bool = True
    cache_path: Path | None = None
    use_cache: bool = True
    trt_version: str = DEFAULT_TRT_VERSION
    thresholds: Thresholds = field(default_factory=lambda: DEFAULT_THRESHOLDS["int8"])
    top1: bool | None = None  # None: for classifier-like outputs (softmax or [N, C]: reference.class_axes)
    max_samples: int = 0  # 0 = every calibration sample
    remainder: Remainder = "fp16"
    fp16: Fp16Settings = REMAINDER_FP16  # the rules for the FP16 remainder
    fold_batchnorm: bool = True  # with the FP16 remainder: fold Conv -> BatchNormalization before Q/DQ
    auto_exclude: bool = False  # keep the fewest layers out of INT8 until the gate passes
    # auto_exclude keeps at least this share of the Conv/ConvTranspose/MatMul/Gemm layers in INT8, and
    # stops (Int8ShareError, exit 8) as soon as the gate cannot pass within it; 0: no limit
    min_share: float = 0.0
    sensitivity: bool = False  # measure every quantized layer's own error (always done when the gate fails)
    # method "auto": also a per-tensor mix of the candidates (each activation tensor the scale under which the
    # layers reading it add the least error; the per_tensor module), judged on the held-out samples like the others
    auto_per_tensor: bool = False
    # method "auto": subtract each quantized layer's mean INT8 output shift from its bias (the bias module), kept only
    # when the whole model agrees better with FP32 on the held-out samples
    auto_bias_correction: bool = True
    # method "auto": SmoothQuant-style migration of LayerNorm outlier channels into the MatMul/Gemm weights that
    # read them (the smooth module), kept only when the whole model agrees better with FP32 on the held-out samples
    auto_smoothing: bool = True
    # build even when the judged samples cannot support the claim a pass makes (claim.py): the report then says
    # "unverified" instead of refusing (Int8EvidenceError, exit 11)
    unverified: bool = False
    # method "auto": stop trying candidates at the first that passes with margin (choice.with_margin), and then
    # skip bias correction; False measures every candidate and part (benchmarks, tests of the parts)
    early_stop: bool = True
    # method "auto": the candidate calibrations measured in one pair of sessions, their scales inputs (the
    # scale_fed module: the same numbers); False builds each (tests comparing the two)
    shared_sessions: bool = True
