"""The pipeline as Python functions: what the CLI commands do, minus the printing.

Each function takes paths and one frozen settings object, returns the stage's typed
report, and raises the same :mod:`trtconv.errors` exceptions the CLI turns into exit
codes (``exc.exit_code``), so a script and a Makefile see the same verdicts.
Examples (run as tests) are in docs/api.md.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtconv.analyze import analyze
from trtconv.analyze.live import compare_live
from trtconv.load import approx_size, load_model, parse_shapes, save_model
from trtconv.outputs import check_output_path
from trtconv.pipeline.build import build as run_build
from trtconv.pipeline.build_settings import (
    BuildSettings,
    gate_thresholds,
    quantize_settings,
    rewrite_settings,
)
from trtconv.pipeline.quantize import (
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    not_the_input,
    quantize,
)
from trtconv.plan.plan import target_name
from trtconv.rewrites import RewriteSettings
from trtconv.rewrites import rewrite as rewrite_model
from trtconv.trt.environment import installed_target
from trtconv.trt.realparse import RTX_MODULE, run_isolated

if TYPE_CHECKING:
    from trtconv.analyze import CheckReport
    from trtconv.pipeline.build import BuildOutcome
    from trtconv.rewrites import RewriteResult, RewriteSettings

PathLike = str | os.PathLike[str]
ShapesArg = Mapping[str, Sequence[int]] | str | None

__all__ = ["BuildSettings", "QuantizeAccuracyError", "QuantizeResult", "QuantizeSettings", "build", "check",
           "default_target", "gate_thresholds", "quantize", "quantize_settings", "rewrite", "rewrite_settings",
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

    ``trt=None``: the TensorRT that is installed (:func:`default_target`). ``report.verdict`` is "supported", "needs-rewrite" or "unsupported"; ``report.exit_code``
    is what ``trtconv check`` would exit with. Weights are not loaded: a 10 GB model costs
    no more than its graph. ``live=True`` also runs the real parser where that TensorRT is
    installed (``tensorrt_rtx`` for ``trt="rtx"``, with a CPU-only build; ``tensorrt`` otherwise,
    parse only), in a child process, and puts its answer in ``report.live``.
    """

    shape_map = _shapes(shapes)  # usage errors before reading a large file
    trt = trt or default_target()[0]
    report = analyze(load_model(model, structure_only=True), trt, shape_map)
    return _with_live(report, Path(model), trt, shape_map) if live else report


def _with_live(report: CheckReport, path: Path, trt: str, shapes: Mapping[str, Sequence[int]]) -> CheckReport:
    module = RTX_MODULE if trt == "rtx" else "tensorrt"
    if importlib.util.find_spec(module) is None:
        note = f"--live: {module} is not installed, so this is the prediction only"
        return replace(report, warnings=(*report.warnings, note))
    return compare_live(report, run_isolated(path, module, build=module == RTX_MODULE, shapes=shapes))


# --------------------------------------------------------------------------- rewrite


def rewrite(model: PathLike, output: PathLike | None = None, settings: RewriteSettings | None = None, *,
            force: bool = False, step: Callable[[str], None] | None = None) -> RewriteResult:
    """Rewrite ``model`` for TensorRT, every rewrite proven with ONNX Runtime; save to ``output`` if given.

    Raises AccuracyError (exit 7) if a proof fails; nothing is written then. The output
    keeps its weights in ``<output>.data`` when the input had external data or the result
    is large. ``step(name)`` is called after "load", "rewrite" and "save" (progress).
    """

    settings = settings or RewriteSettings()
    say = step or (lambda _name: None)
    if output is not None:
        check_output_path(Path(output), force=force)  # fail before the work, not after
        not_the_input(model, output)
    loaded = load_model(model, lazy_from=settings.lazy_weights_bytes)
    say("load")
    result = rewrite_model(loaded, settings)
    say("rewrite")
    if output is not None:
        external = bool(loaded.external_refs) or approx_size(result.model) > settings.large_model_bytes
        save_model(result.model, output, force=force, external_data=True if external else None)
        say("save")
    return result


# --------------------------------------------------------------------------- build


def build(model: PathLike, output: PathLike, settings: BuildSettings | None = None, *, force: bool = False,
          say: Any = None, progress: Any = None, outcome: BuildOutcome | None = None) -> BuildOutcome:
    """check -> rewrite -> precision -> TensorRT build -> verify, as ``trtconv build`` runs it.

    Without TensorRT the prepared ONNX is still written and BackendUnavailableError (exit 9)
    says where; ``BuildSettings(prepare_only=True)`` stops there on purpose and succeeds.
    ``say(stage, status)`` hears each stage start and end; pass ``outcome`` (a fresh
    ``BuildOutcome``) to see how far the pipeline got when it raises.
    """

    settings = settings or BuildSettings()
    target = settings.trt or default_target()[0]
    return run_build(Path(model), Path(output), settings, target, force=force, say=say, progress=progress,
                     outcome=outcome)


def default_target() -> tuple[str, str]:
    """``trt``'s value when none is given, and why: the TensorRT that is installed (TensorRT 10/11 if it
    imports, else TensorRT-RTX; the newest TensorRT where neither is)."""
    return installed_target()
