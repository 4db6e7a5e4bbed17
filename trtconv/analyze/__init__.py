"""Stage 2, analyze: what the target TensorRT parser will reject, per node, before any GPU is touched."""

from trtconv.analyze.check_report import SCHEMA, UNSUPPORTED, CheckReport, Finding, InputReport, NodeReport
from trtconv.analyze.domain_blind import COLLISIONS, DOMAIN_BLIND, WRONG_ENGINE
from trtconv.analyze.live import (
    compare_live,
    error_path,
)
from trtconv.analyze.run_check import analyze
from trtconv.analyze.support import available_versions, load_table

__all__ = [
    "UNSUPPORTED",
    "COLLISIONS",
    "DOMAIN_BLIND",
    "WRONG_ENGINE",
    "SCHEMA",
    "CheckReport",
    "Finding",
    "InputReport",
    "NodeReport",
    "analyze",
    "available_versions",
    "compare_live",
    "error_path",
    "load_table",
]
