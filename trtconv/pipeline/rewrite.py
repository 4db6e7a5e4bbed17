"""``rewrite`` as one pipeline: check the output path, load (large weights stay on disk), rewrite
with proofs, save. ``trtconv.api.rewrite`` and ``trtconv rewrite`` both call :func:`rewrite`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import onnx

from trtconv.errors import InvalidModelError, UsageError
from trtconv.load import approx_size, dynamic_inputs, load_model, save_model, shapes_text
from trtconv.outputs import check_not_the_model, check_output_path
from trtconv.plan import build_profiles, run_corners
from trtconv.rewrites import RewriteResult, RewriteSettings
from trtconv.rewrites import rewrite as rewrite_model


def _runs_at_the_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """``--shapes`` the graph cannot run at (a convolution longer than the input) are a usage error, as in
    build's pre-flight: the model written would declare a shape it cannot take. Run where the shapes leave no
    dim open, and not where ONNX Runtime cannot load the graph (plugin nodes: the node proofs stand in); a
    failure on random values alone is a warning."""
    profiles = build_profiles(model, shapes=shapes_text(shapes), required=False)
    try:
        runs = run_corners(model, profiles)
    except InvalidModelError:
        return
    if runs.failures:
        raise UsageError(f"the graph cannot run at --shapes {shapes_text(shapes)}: {runs.failures[0].describe()}",
                         hint="give --shapes the model supports (the sizes its data has); nothing was written")


def rewrite(model: Path, output: Path | None, settings: RewriteSettings, *, force: bool = False,
            step: Callable[[str], None] | None = None) -> RewriteResult:
    """Rewrite ``model``; save to ``output`` if given (nothing written when a proof fails)."""
    say = step or (lambda _name: None)
    if output is not None:
        check_not_the_model(output, model, "-o", ".rewritten.onnx")  # never overwritten, --force or not
        check_output_path(output, force=force)  # fail before the work, not after
    loaded = load_model(model, lazy_from=settings.lazy_weights_bytes)
    say("load")
    result = rewrite_model(loaded, settings)
    say("rewrite")
    if settings.shapes and not dynamic_inputs(result.model) and approx_size(result.model) <= settings.large_model_bytes:
        _runs_at_the_shapes(result.model, settings.shapes)
    if output is not None:
        external = bool(loaded.external_refs) or approx_size(result.model) > settings.large_model_bytes
        save_model(result.model, output, force=force, external_data=True if external else None)
        say("save")
    return result
