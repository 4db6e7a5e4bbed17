"""Layer verify: compare a built engine with the ONNX Runtime reference on the same inputs."""

from trtconv.verify.engine_vs_reference import (
    VerifyReport,
    verify_engine,
    verify_engine_corners,
)

__all__ = [
    "VerifyReport",
    "verify_engine",
    "verify_engine_corners",
]
