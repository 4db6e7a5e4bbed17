"""The pipeline as Python functions: what the CLI commands do, minus the printing.

The front door of the Python API (docs/api.md): the stage functions (``check``, ``rewrite``,
``quantize``, ``build``: :mod:`trtconv.api.stages`) and what the CLI's other commands need
(:mod:`~trtconv.api.engines`, :mod:`~trtconv.api.files`, :mod:`~trtconv.api.reports`). The CLI
imports only from here.
"""

from __future__ import annotations

from trtconv.api.engines import (
    BenchResult,
    BenchSettings,
    Environment,
    PlanSource,
    TensorRTStatus,
    VerifyReport,
    bench_engine,
    inspect_engine,
    layer_rows,
    model_name,
    off_precision,
    probe,
    probe_driver,
    problems,
    unservable,
    verify_engine,
    write_repository,
)
from trtconv.api.files import (
    dims_text,
    disk_bytes,
    file_sha256,
    fixed_shapes_hint,
    identity_problems,
    large_weights,
    load_model,
    manifest_path,
    parse_shapes,
    read_manifest,
    return_large_blocks,
    update_manifest,
)
from trtconv.api.reports import (
    LONG_PHASES,
    PHASES,
    OutputStats,
    parse_limit,
    parts_line,
    qualified_op,
    report_html,
    rule_summaries,
)
from trtconv.api.stages import (
    DCN_TARGETS,
    RULE_NAMES,
    BuildOutcome,
    BuildSettings,
    CheckReport,
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    RewriteSettings,
    build,
    check,
    default_target,
    engine_identity_hash,
    gate_thresholds,
    quantize,
    quantize_settings,
    rewrite,
    rewrite_settings,
    target_name,
)

__all__ = [
    # the stages (stages.py)
    "DCN_TARGETS", "RULE_NAMES", "BuildOutcome", "BuildSettings", "CheckReport", "QuantizeAccuracyError",
    "QuantizeResult", "QuantizeSettings", "RewriteSettings", "build", "check", "default_target",
    "engine_identity_hash", "gate_thresholds", "quantize", "quantize_settings", "rewrite", "rewrite_settings",
    "target_name",
    # engines (engines.py)
    "BenchResult", "BenchSettings", "Environment", "PlanSource", "TensorRTStatus", "VerifyReport", "bench_engine",
    "inspect_engine", "layer_rows", "model_name", "off_precision", "probe", "probe_driver", "problems",
    "unservable", "verify_engine", "write_repository",
    # files (files.py)
    "dims_text", "disk_bytes", "file_sha256", "fixed_shapes_hint", "identity_problems", "large_weights", "load_model", "manifest_path", "parse_shapes",
    "read_manifest", "return_large_blocks", "update_manifest",
    # reports (reports.py)
    "LONG_PHASES", "PHASES", "OutputStats", "parse_limit", "parts_line", "qualified_op", "report_html",
    "rule_summaries",
]
