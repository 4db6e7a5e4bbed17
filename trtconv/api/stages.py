"""The stage functions of the Python API: check, rewrite, quantize, build (minus the printing).

Each function takes paths and one frozen settings object, returns the stage's typed
report, and raises the same :mod:`trtconv.errors` exceptions the CLI turns into exit
codes (``exc.exit_code``), so a script and a Makefile see the same verdicts.
Examples (run as tests) are in docs/api.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtconv.analyze import CheckReport
from trtconv.load import parse_shape_values, parse_shapes
from trtconv.pipeline import (
    BuildOutcome,
    BuildSettings,
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    gate_thresholds,
    quantize,
    quantize_settings,
    request_identity,
    rewrite_settings,
)
from trtconv.pipeline import build as run_build
from trtconv.pipeline import check as run_check
from trtconv.pipeline import rewrite as run_rewrite
from trtconv.plan import identity_hash, target_name
from trtconv.rewrites import DCN_TARGETS, RULE_NAMES, RewriteSettings
from trtconv.trt import installed_target

if TYPE_CHECKING:
    from trtconv.rewrites import RewriteResult, RewriteSettings

PathLike = str | os.PathLike[str]
ShapesArg = Mapping[str, Sequence[int]] | str | None

__all__ = ["DCN_TARGETS", "RULE_NAMES", "BuildOutcome", "BuildSettings", "CheckReport", "QuantizeAccuracyError", "QuantizeResult", "QuantizeSettings", "build", "check",
           "default_target", "engine_identity_hash", "gate_thresholds", "quantize", "quantize_settings", "rewrite", "rewrite_settings",
           "target_name"]


def _shapes(shapes: ShapesArg) -> dict[str, tuple[int, ...]]:
    """``"x:1x3x224x224"`` (the CLI's form) or ``{"x": (1, 3, 224, 224)}``."""

    if shapes is None or isinstance(shapes, str):
        return parse_shapes(shapes)
    return {str(k): tuple(int(d) for d in v) for k, v in shapes.items()}


# --------------------------------------------------------------------------- check


def check(model: PathLike, *, trt: str | None = None, shapes: ShapesArg = None,
          live: bool = False) -> CheckReport:
    """What TensorRT ``trt``'s ONNX parser will reject in ``model``, node by node.

    ``trt=None``: the TensorRT that is installed (:func:`default_target`). ``report.verdict``
    is "supported", "needs-rewrite" or "unsupported"; ``report.exit_code`` is what ``trtconv check`` would exit with. Weights are not loaded: a 10 GB model costs
    no more than its graph. ``live=True`` also runs the real parser where that TensorRT is
    installed (``tensorrt_rtx`` for ``trt="rtx"``, with a CPU-only build; ``tensorrt`` otherwise,
    parse only), in a child process, and puts its answer in ``report.live``.
    """

    shape_map = _shapes(shapes)  # usage errors before reading a large file
    values = parse_shape_values(shapes) if isinstance(shapes, str) else {}  # shape-tensor inputs: the probe's profile
    return run_check(Path(model), trt or default_target()[0], shape_map, live=live, values=values)


# --------------------------------------------------------------------------- rewrite


def rewrite(model: PathLike, output: PathLike | None = None, settings: RewriteSettings | None = None, *,
            force: bool = False, step: Callable[[str], None] | None = None) -> RewriteResult:
    """Rewrite ``model`` for TensorRT, every rewrite proven with ONNX Runtime; save to ``output`` if given.

    Raises AccuracyError (exit 7) if a proof fails; nothing is written then. The output
    keeps its weights in ``<output>.data`` when the input had external data or the result
    is large. ``step(name)`` is called after "load", "rewrite" and "save" (progress).
    """

    return run_rewrite(Path(model), None if output is None else Path(output), settings or RewriteSettings(),
                       force=force, step=step)


# --------------------------------------------------------------------------- build


def build(model: PathLike, output: PathLike, settings: BuildSettings | None = None, *, force: bool = False,
          say: Any = None, progress: Any = None, outcome: BuildOutcome | None = None,
          command: str | None = None) -> BuildOutcome:
    """check -> rewrite -> precision -> TensorRT build -> verify, as ``trtconv build`` runs it.

    Without TensorRT the CPU stages run, BackendUnavailableError (exit 9) is raised and (unless
    ``keep_prepared``) the prepared ONNX is removed, as after any failure;
    ``BuildSettings(prepare_only=True)`` stops there on purpose and succeeds.
    ``say(stage, status)`` hears each stage start and end; pass ``outcome`` (a fresh
    ``BuildOutcome``) to see how far the pipeline got when it raises. ``command``: the command line
    the hints repeat (the CLI passes the user's; default: one made from the settings).
    """

    settings = settings or BuildSettings()
    target = settings.trt or default_target()[0]
    return run_build(Path(model), Path(output), settings, target, force=force, say=say, progress=progress,
                     outcome=outcome, command=command)


def default_target() -> tuple[str, str]:
    """``trt``'s value when none is given, and why: the TensorRT that is installed (TensorRT 10/11 if it
    imports, else TensorRT-RTX; the newest TensorRT where neither is)."""
    return installed_target()


def engine_identity_hash(model: PathLike, output: PathLike, settings: BuildSettings | None = None) -> str:
    """The identity hash the manifest of ``build(model, output, settings)`` will record (the result
    cache keys on it): ONNX, settings, TensorRT version, plugin libraries, target."""
    settings = settings or BuildSettings()
    target = settings.trt or default_target()[0]
    plan = settings.plan(model, output, target)
    return identity_hash(request_identity(Path(model), settings, target, plan))
