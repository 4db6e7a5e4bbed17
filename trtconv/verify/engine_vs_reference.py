"""Engine against ONNX Runtime on the same inputs: per-output error statistics and a verdict.

Inputs come from an ``.npz`` (keys = input names) or are generated reproducibly
(seeded). They are checked against the ONNX's inputs *before* TensorRT is touched,
so bad data fails with BAD_DATA on any machine. The reference is the ONNX given with
``--onnx`` run on the CPU (ONNX Runtime, graph optimizations off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtconv.errors import DataError, InvalidModelError
from trtconv.load import input_dims, load_model
from trtconv.plan import ShapesKey, does_not_fit, manifest_path, read_manifest, shapes_key
from trtconv.reference import (
    OutputStats,
    PooledStats,
    Thresholds,
    class_axes,
    compare_outputs,
    ort,
    violations,
)
from trtconv.samples import SampleSource, iter_samples_with_origin, model_inputs
from trtconv.trt import EngineRunner, profile_shapes


@dataclass(frozen=True)
class VerifyReport:
    stats: tuple[OutputStats, ...]
    failures: tuple[str, ...]
    thresholds: Thresholds
    inputs: dict[str, list[int]] = field(default_factory=dict)
    seed: int | None = None
    samples: int = 1  # input samples run (statistics pooled over them)

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
            "samples": self.samples,
            "outputs": [s.to_json() for s in self.stats],
        }


def make_inputs(model: onnx.ModelProto, *, inputs: Path | None, shapes: Mapping[str, tuple[int, ...]] | None,
                seed: int) -> dict[str, np.ndarray]:
    if inputs is not None:
        return input_samples([inputs], model)[0][1]
    return ort.random_feeds(model, shapes, seed=seed)


def manifest_opt_shapes(engine_path: Path) -> dict[str, tuple[int, ...]]:
    """Profile 0's opt shape of each dynamic input, from the engine's manifest ({} without one)."""
    path = manifest_path(engine_path)
    if not path.is_file():
        return {}
    try:
        profiles = read_manifest(path).get("profiles") or []
    except (DataError, OSError):
        return {}
    first = profiles[0] if profiles and isinstance(profiles[0], dict) else {}
    return {name: tuple(int(d) for d in rng["opt"]) for name, rng in first.items()
            if isinstance(rng, dict) and "opt" in rng}


def open_dims(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Inputs with a dynamic dim that ``shapes`` does not fix."""
    return [name for name, dims in input_dims(model).items()
            if name not in shapes and any(not isinstance(d, int) for d in dims)]


def input_samples(paths: Sequence[Path], model: onnx.ModelProto) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Every sample in ``paths`` (files or folders of .npy/.npz, an .npz of many samples), checked,
    as (where it came from, feeds): the same loader and checks as calibration data."""
    inputs = model_inputs(model)
    out: list[tuple[str, dict[str, np.ndarray]]] = []
    for path in paths:
        source = SampleSource.detect(path)
        if source.kind != "npy":
            raise DataError(f"{path}: verify --inputs takes .npy/.npz samples, not images",
                            hint="save the preprocessed tensors with numpy.savez(path, input_name=array)")
        out += list(iter_samples_with_origin(source, inputs))
    return out


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
    reference: Mapping[str, np.ndarray] | None = None,
    axes: Mapping[str, int] | None = None,
) -> VerifyReport:
    """Judge ``got`` (the engine's outputs) against the reference's outputs on ``feeds``
    (``reference``: already computed; else the reference is run here). ``axes``: per output, the axis of its
    classes for top-1 (:func:`~trtconv.precision.class_axes.class_axes`; the last where not given)."""
    ref = dict(reference) if reference is not None else ort.run_model(model, feeds)
    missing = sorted(set(ref) - set(got))
    if missing:
        return VerifyReport((), (f"engine has no output named {', '.join(missing)}",), thresholds,
                            {k: list(v.shape) for k, v in feeds.items()}, seed)
    stats = compare_outputs(ref, {k: got[k] for k in ref}, top1=top1, by_error=True, axes=axes)
    return VerifyReport(tuple(stats), tuple(violations(stats, thresholds)), thresholds,
                        {k: list(v.shape) for k, v in feeds.items()}, seed)


def verify_engine(
    engine_path: Path,
    onnx_path: Path,
    *,
    inputs: Path | Sequence[Path] | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    thresholds: Thresholds,
    plugin_libraries: tuple[Path, ...] = (),
    seed: int = 0,
    top1: bool = False,
    check_compatibility: bool = True,
    target: str | None = None,
) -> VerifyReport:
    """Inputs are prepared and checked first; only then is TensorRT loaded.

    ``inputs``: one ``.npz`` of named arrays, or files/folders holding several samples (then
    every sample runs and the statistics are pooled over all of them). Random inputs of a
    dynamic model take the dims ``shapes`` leaves open from the engine's profile 0 (opt): from its
    manifest, else from the engine itself. ``target``: the engine's ``--trt`` (None: manifest/header).
    """

    loaded = load_model(onnx_path, load_weights=False)
    axes = class_axes(loaded.proto) if top1 else {}
    paths = [inputs] if isinstance(inputs, Path) else list(inputs or ())
    runner = None
    if paths:
        samples = input_samples(paths, loaded.proto)
    else:
        shapes = {**manifest_opt_shapes(engine_path), **(shapes or {})}
        if open_dims(loaded.proto, shapes):  # no manifest: the engine's own profile says
            runner = EngineRunner(engine_path, plugin_libraries, check_compatibility=check_compatibility, target=target)
            shapes = {**{name: mmo[1] for name, mmo in profile_shapes(runner).items()}, **shapes}
        samples = [("random", make_inputs(loaded.proto, inputs=None, shapes=shapes, seed=seed))]
    for _, feeds in samples:
        preflight(loaded.proto, feeds)

    runner = runner or EngineRunner(engine_path, plugin_libraries, check_compatibility=check_compatibility,
                                    target=target)
    if len(samples) == 1:
        feeds = samples[0][1]
        return compare_with_reference(onnx_path, feeds, runner.infer(feeds), thresholds, top1=top1,
                                      seed=None if paths else seed, axes=axes)
    pooled: dict[str, PooledStats] = {}
    for _, feeds in samples:
        ref = ort.run_model(onnx_path, feeds)
        got = runner.infer(feeds)
        missing = sorted(set(ref) - set(got))
        if missing:
            return VerifyReport((), (f"engine has no output named {', '.join(missing)}",), thresholds,
                                {k: list(v.shape) for k, v in feeds.items()}, None, len(samples))
        for name, r in ref.items():
            pooled.setdefault(name, PooledStats(name, top1, by_error=True, axis=axes.get(name, -1))).add(
                r, np.asarray(got[name]))
    stats = [p.stats() for p in pooled.values()]
    first = samples[0][1]
    return VerifyReport(tuple(stats), tuple(violations(stats, thresholds)), thresholds,
                        {k: list(v.shape) for k, v in first.items()}, None, len(samples))


def verify_engine_corners(
    engine_path: Path,
    onnx_path: Path | onnx.ModelProto,
    corners: list[tuple[int, str, dict[str, tuple[int, ...]]]],
    *,
    thresholds: Thresholds,
    plugin_libraries: tuple[Path, ...] = (),
    seed: int = 0,
    check_compatibility: bool = True,
    references: Mapping[ShapesKey, tuple[ort.Feeds, ort.Feeds]] | None = None,
) -> dict[str, Any]:
    """The engine against ONNX Runtime at each (profile, corner, shapes): an engine right at its
    opt shape can still be wrong at max (FP16 overflow on larger inputs, a bad tactic).

    ``references``: (inputs, outputs) the reference already gave at some corners (keyed by
    :func:`trtconv.plan.corners.shapes_key`), reused instead of running it again."""

    model = onnx_path if isinstance(onnx_path, onnx.ModelProto) else load_model(onnx_path, load_weights=False).proto
    known = references or {}
    plan: list[tuple[int, str, ort.Feeds, ort.Feeds | None]] = []
    for p, c, s in corners:
        if shapes_key(s) in known:
            feeds, ref = known[shapes_key(s)]
            plan.append((p, c, feeds, ref))
            continue
        feeds = make_inputs(model, inputs=None, shapes=s, seed=seed)
        preflight(model, feeds)
        plan.append((p, c, feeds, None))
    runner = EngineRunner(engine_path, plugin_libraries, check_compatibility=check_compatibility)
    results, failures = [], []
    for profile, corner, feeds, ref in plan:
        runner.select_profile(profile)
        report = compare_with_reference(onnx_path, feeds, runner.infer(feeds), thresholds, seed=seed, reference=ref)
        results.append({"profile": profile, "corner": corner, **report.to_json()})
        failures += [f"profile {profile} {corner}: {f}" for f in report.failures]
    return {"passed": not failures, "failures": failures, "seed": seed,
            "thresholds": {k: v for k, v in vars(thresholds).items() if v is not None}, "corners": results}
