"""``rewrite`` as one pipeline: check the output path, load (large weights stay on disk), rewrite
with proofs, save. ``trtconv.api.rewrite`` and ``trtconv rewrite`` both call :func:`rewrite`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtconv.load import approx_size, load_model, save_model
from trtconv.outputs import check_output_path
from trtconv.pipeline.quantize import not_the_input
from trtconv.rewrites import RewriteResult, RewriteSettings
from trtconv.rewrites import rewrite as rewrite_model


def rewrite(model: Path, output: Path | None, settings: RewriteSettings, *, force: bool = False,
            step: Callable[[str], None] | None = None) -> RewriteResult:
    """Rewrite ``model``; save to ``output`` if given (nothing written when a proof fails)."""
    say = step or (lambda _name: None)
    if output is not None:
        check_output_path(output, force=force)  # fail before the work, not after
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
