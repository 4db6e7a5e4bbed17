"""``check`` as one pipeline step: read the graph (not the weights), judge it against a target's
parser rules, and optionally ask the real parser in a child process. ``trtconv.api.check`` and
``trtconv check`` both call :func:`check`."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from trtconv.analyze import UNSUPPORTED, CheckReport, analyze, compare_live
from trtconv.load import LAZY_WEIGHTS_BYTES, load_model
from trtconv.pipeline.build_stages import folded_verdict
from trtconv.rewrites import RewriteSettings
from trtconv.trt import RTX_MODULE, locate, run_isolated


def check(model: Path, target: str, shapes: Mapping[str, Sequence[int]], *, live: bool = False,
          values: Mapping[str, Sequence[int]] | None = None) -> CheckReport:
    """What ``target``'s ONNX parser will reject in ``model``; ``live``: also the real parser's answer
    (``values``: the shape-tensor inputs' values its build profile needs)."""
    report = analyze(load_model(model, structure_only=True), target, dict(shapes))
    if report.verdict == UNSUPPORTED and shapes and all(i.covered for i in report.inputs):
        # as `build --shapes` does: a model refused as it is may parse folded with the shapes (an If whose
        # condition reads only shapes, an LSTM inside it); the weights are read only here
        loaded = load_model(model, lazy_from=LAZY_WEIGHTS_BYTES)
        report = replace(report, folded=folded_verdict(loaded, target, dict(shapes), RewriteSettings(target=target)))
    return _with_live(report, model, target, shapes, values or {}) if live else report


def _with_live(report: CheckReport, path: Path, trt: str, shapes: Mapping[str, Sequence[int]],
               values: Mapping[str, Sequence[int]]) -> CheckReport:
    module = RTX_MODULE if trt == "rtx" else "tensorrt"
    if importlib.util.find_spec(module) is None:
        note = f"--live: {module} is not installed, so this is the prediction only"
        return replace(report, warnings=(*report.warnings, note))
    real = run_isolated(path, module, build=module == RTX_MODULE, shapes=shapes, values=values)
    report = compare_live(report, real)
    live = report.live
    if live is None or live.build != "fail" or live.placeholder_inputs:  # a build at placeholder dims says nothing
        return report

    def builds(prefix: Path, left: float) -> bool | None:
        built = run_isolated(prefix, module, build=True, shapes=shapes, values=values, timeout=left).get("built")
        return None if built is None else bool(built)

    where = locate(path, list(real.get("build_errors") or ()), builds)
    return replace(report, live=replace(live, failing_node=where.describe())) if where is not None else report
