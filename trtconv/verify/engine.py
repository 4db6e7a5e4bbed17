"""Engine against ONNX Runtime on the same inputs: per-output error statistics and a verdict.

Inputs come from an ``.npz`` (keys = input names) or are generated reproducibly
(seeded). They are checked against the ONNX's inputs *before* TensorRT is touched,
so bad data fails with BAD_DATA on any machine. The reference is the ONNX given with
``--onnx`` run on the CPU (ONNX Runtime, graph optimizations off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtconv.errors import DataError, InvalidModelError
from trtconv.load import load_model
from trtconv.load.shapes import input_dims
from trtconv.plan.corners import does_not_fit
from trtconv.reference import ort
from trtconv.reference.compare import OutputStats, Thresholds, compare_outputs, violations
from trtconv.trt.engine import EngineRunner


@dataclass(frozen=True)
class VerifyReport:
    stats: tuple[OutputStats, ...]
    failures: tuple[str, ...]
    thresholds: Thresholds
    inputs: dict[str, list[int]] = field(default_factory=dict)
    seed: int | None = None

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failures": list(self.failures),
            "thresholds": self.thresholds.to_json(),
            "inputs": self.inputs,
            "seed": self.seed,
            "outputs": [s.to_json() for s in self.stats],
        }


def load_inputs(path: Path, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """An ``.npz`` of named arrays, checked against the model's inputs (names, ranks, fixed
    dims, dtype kind, finiteness) so a mistake shows up as one clear line."""
    try:
        with np.load(path, allow_pickle=False) as data:
            feeds = {k: np.asarray(data[k]) for k in data.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not a readable .npz file: {exc}",
                        hint="save inputs with numpy.savez(path, input_name=array, ...)") from exc
    dims = input_dims(model)
    types = ort.input_types(model)
    missing = [n for n in dims if n not in feeds]
    extra = [n for n in feeds if n not in dims]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"not inputs of the model: {', '.join(extra)}")
        raise DataError(f"{path}: {'; '.join(parts)}", hint=f"the model's inputs are {', '.join(dims)}")
    for name, arr in feeds.items():
        want = dims[name]
        if want and arr.ndim != len(want):
            raise DataError(f"{path}: input {name!r} has {arr.ndim} dims, the model expects {len(want)} {want}")
        for axis, (d, n) in enumerate(zip(want, arr.shape)):
            if isinstance(d, int) and d != n:
                raise DataError(f"{path}: input {name!r} dim {axis} is {n}, the model fixes it at {d}")
        dt = types[name]
        if arr.dtype.kind != dt.kind and not (arr.dtype.kind in "iu" and dt.kind in "iu"):
            raise DataError(f"{path}: input {name!r} is {arr.dtype}, the model expects {dt}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise DataError(f"{path}: input {name!r} contains NaN or Inf")
        feeds[name] = arr.astype(dt, copy=False)
    return feeds


def make_inputs(model: onnx.ModelProto, *, inputs: Path | None, shapes: Mapping[str, tuple[int, ...]] | None,
                seed: int) -> dict[str, np.ndarray]:
    if inputs is not None:
        return load_inputs(inputs, model)
    return ort.random_feeds(model, shapes, seed=seed)


def preflight(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> None:
    """Refuse, before ONNX Runtime allocates it, a reference run that cannot fit in memory."""

    why = does_not_fit(model, {k: tuple(int(d) for d in v.shape) for k, v in feeds.items()})
    if why:
        raise InvalidModelError(f"ONNX Runtime cannot run the reference at these shapes: {why}",
                                hint="check the model for a huge constant shape, or verify at smaller --shapes")


def compare_with_reference(
    model: onnx.ModelProto | Path,
    feeds: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
    thresholds: Thresholds,
    *,
    top1: bool = False,
    seed: int | None = None,
) -> VerifyReport:
    """Run the reference on ``feeds`` and judge ``got`` (the engine's outputs) against it."""
    ref = ort.run_model(model, feeds)
    missing = sorted(set(ref) - set(got))
    if missing:
        return VerifyReport((), (f"engine has no output named {', '.join(missing)}",), thresholds,
                            {k: list(v.shape) for k, v in feeds.items()}, seed)
    stats = compare_outputs(ref, {k: got[k] for k in ref}, top1=top1)
    return VerifyReport(tuple(stats), tuple(violations(stats, thresholds)), thresholds,
                        {k: list(v.shape) for k, v in feeds.items()}, seed)


def verify_engine(
    engine_path: Path,
    onnx_path: Path,
    *,
    inputs: Path | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    thresholds: Thresholds,
    plugin_libraries: tuple[Path, ...] = (),
    seed: int = 0,
    top1: bool = False,
    check_compatibility: bool = True,
) -> VerifyReport:
    """Inputs are prepared and checked first; only then is TensorRT loaded."""

    loaded = load_model(onnx_path, load_weights=False)
    feeds = make_inputs(loaded.proto, inputs=inputs, shapes=shapes, seed=seed)
    preflight(loaded.proto, feeds)

    runner = EngineRunner(engine_path, plugin_libraries, check_compatibility=check_compatibility)
    got = runner.infer(feeds)
    return compare_with_reference(onnx_path, feeds, got, thresholds, top1=top1,
                                  seed=None if inputs is not None else seed)


def verify_engine_corners(
    engine_path: Path,
    onnx_path: Path,
    corners: list[tuple[int, str, dict[str, tuple[int, ...]]]],
    *,
    thresholds: Thresholds,
    plugin_libraries: tuple[Path, ...] = (),
    seed: int = 0,
    check_compatibility: bool = True,
) -> dict[str, Any]:
    """The engine against ONNX Runtime at each (profile, corner, shapes): an engine right at its
    opt shape can still be wrong at max (FP16 overflow on larger inputs, a bad tactic)."""

    model = load_model(onnx_path, load_weights=False).proto
    plan = [(p, c, make_inputs(model, inputs=None, shapes=s, seed=seed)) for p, c, s in corners]
    for _, _, feeds in plan:
        preflight(model, feeds)
    runner = EngineRunner(engine_path, plugin_libraries, check_compatibility=check_compatibility)
    results, failures = [], []
    for profile, corner, feeds in plan:
        runner.select_profile(profile)
        report = compare_with_reference(onnx_path, feeds, runner.infer(feeds), thresholds, seed=seed)
        results.append({"profile": profile, "corner": corner, **report.to_json()})
        failures += [f"profile {profile} {corner}: {f}" for f in report.failures]
    return {"passed": not failures, "failures": failures, "seed": seed,
            "thresholds": {k: v for k, v in vars(thresholds).items() if v is not None}, "corners": results}
