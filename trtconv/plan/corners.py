"""Run the graph at every profile's min/opt/max shapes on ONNX Runtime before building.

A profile corner the graph cannot handle (a Reshape that changes volume, a Concat of
mismatched dims) makes TensorRT fail minutes into a build with "kOPT values for
profile 0 violate shape constraints". ONNX Runtime finds the same problem in
milliseconds and names the node.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from trtconv.errors import UsageError
from trtconv.load import available_memory, largest_static_tensor, override_input_shapes
from trtconv.plan.build_plan import Profile
from trtconv.reference import ort

log = logging.getLogger(__name__)
CORNERS: tuple[Literal["min", "opt", "max"], ...] = ("min", "opt", "max")
_NODE = re.compile(r"Name:'([^']*)'")
_OP = re.compile(r"running (\w+) node")
SAMPLES_LOOKED_AT = 64  # real samples searched for the corners' shapes


@dataclass(frozen=True)
class CornerFailure:
    profile: int
    corner: str
    shapes: dict[str, tuple[int, ...]]
    node: str | None
    op: str | None
    message: str

    def describe(self) -> str:
        where = f"node {self.node!r}" + (f" ({self.op})" if self.op else "") if self.node else "the graph"
        if not self.shapes:  # a static model: no profile
            return f"the model's static shapes: {where} fails: {self.message}"
        dims = ", ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in self.shapes.items())
        return f"profile {self.profile} {self.corner} shapes ({dims}): {where} fails: {self.message}"


def does_not_fit(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Why running ``model`` at ``shapes`` would exhaust host memory, or None."""

    avail = available_memory()
    if not avail:
        return None
    shaped = override_input_shapes(model, shapes) if shapes else model
    big = largest_static_tensor(shaped)
    if big is None or big[1] <= avail // 2:
        return None
    return f"tensor {big[0]!r} alone would need {big[1] / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB are available"


ShapesKey = tuple[tuple[str, tuple[int, ...]], ...]


def shapes_key(shapes: dict[str, tuple[int, ...]]) -> ShapesKey:
    """One corner's identity: its input shapes, in a fixed order."""
    return tuple(sorted(shapes.items()))


@dataclass(frozen=True)
class CornerRuns:
    """What running the graph at every corner found: the failures, the corners not run (and why),
    the corners that failed only on trtconv's synthetic input values (warnings, not failures),
    and, when kept, each corner's inputs and outputs (the reference a built engine is judged by)."""

    failures: tuple[CornerFailure, ...]
    skipped: tuple[str, ...] = ()
    outputs: Mapping[ShapesKey, tuple[ort.Feeds, ort.Feeds]] = field(default_factory=dict)
    value_failures: tuple[CornerFailure, ...] = ()


def run_corners(model: onnx.ModelProto, profiles: tuple[Profile, ...], *, seed: int = 0,
                path: Path | None = None, keep_outputs: bool = False,
                samples: Iterable[Mapping[str, np.ndarray]] | None = None, session: Any = None) -> CornerRuns:
    """Run ``model`` at each corner; the first failure per corner (none: all ran).
    Corners whose tensors would not fit in host memory are not run, and say why.

    Inputs: a sample of ``samples`` whose shapes are the corner's, else seeded random data
    (integer inputs within the tables they index). A corner that fails on those values but runs
    with every integer input 0 (or 1) failed on the *values*, which TensorRT never sees: it is a
    warning (``value_failures``), never blamed on the shapes.

    Raises InvalidModelError only if ONNX Runtime cannot load the model at all; callers
    that hold a not-ORT-runnable graph (plugin nodes) should pass its ORT-runnable form.
    ``path``: the saved model, loaded by ONNX Runtime from disk (models over 2 GB cannot be
    handed over as one protobuf); ``model`` then only provides the input descriptions. ``session``:
    the graph's session where the caller holds one already (one session per graph).
    """
    import onnxruntime

    sess = session if session is not None else ort.session(path if path is not None else model)
    quiet = onnxruntime.RunOptions()
    quiet.log_severity_level = 4  # the failure is reported by us, with the node named
    failures: list[CornerFailure] = []
    value_failures: list[CornerFailure] = []
    skipped: list[str] = []
    outputs: dict[ShapesKey, tuple[ort.Feeds, ort.Feeds]] = {}
    seen: set[tuple[ShapesKey, tuple[tuple[str, tuple[int, ...]], ...]]] = set()
    names = [o.name for o in sess.get_outputs()]
    real = _samples_by_shape(model, samples)
    for index, profile in enumerate(profiles or (Profile(()),)):
        for corner in CORNERS:
            shapes = profile.corner(corner)
            key = shapes_key(shapes)
            ran = (key, tuple(sorted(profile.value_corner(corner).items())))  # shape-tensor values count too
            if ran in seen:
                continue
            seen.add(ran)
            too_big = does_not_fit(model, shapes)
            if too_big:  # a few bytes of ConstantOfShape can declare 16 GiB: never let ORT try
                where = f"profile {index} {corner}" if profiles else "the static shapes"
                log.warning("%s not run on ONNX Runtime: %s", where, too_big)
                skipped.append(f"{where}: {too_big}")
                continue
            try:
                feeds = _sample_at(shapes, real) or _with_values(
                    ort.random_feeds(model, shapes, seed=seed), profile.value_corner(corner))
            except UsageError as exc:
                failures.append(CornerFailure(index, corner, shapes, None, None, exc.message))
                continue
            try:
                values = sess.run(names, feeds, quiet)
            except Exception as exc:  # ORT raises its own RuntimeException types
                failure = _failure(index, corner, shapes, exc)
                rerun = _rerun_with_plain_integers(sess, names, feeds, quiet, set(profile.value_corner(corner)))
                if rerun is None:
                    failures.append(failure)
                    continue
                value_failures.append(failure)
                log.warning("%s: ONNX Runtime failed on trtconv's synthetic input values, not on the shapes (it "
                            "runs with integer inputs %d); TensorRT does not look at values, the build goes on",
                            failure.describe(), rerun[0])
                feeds, values = rerun[1], rerun[2]
            if keep_outputs:
                outputs.setdefault(key, (feeds, {n: np.asarray(v) for n, v in zip(names, values)}))
    return CornerRuns(tuple(failures), tuple(skipped), outputs, tuple(value_failures))


def _samples_by_shape(model: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]] | None
                      ) -> list[ort.Feeds]:
    """The first of the first SAMPLES_LOOKED_AT samples of each distinct set of input shapes (read
    once for every corner; only samples holding every input)."""
    if samples is None:
        return []
    wanted = list(ort.input_types(model))
    kept: dict[tuple[tuple[int, ...], ...], ort.Feeds] = {}
    for sample in itertools.islice(samples, SAMPLES_LOOKED_AT):
        if set(wanted) <= set(sample):
            feeds = {n: np.asarray(sample[n]) for n in wanted}
            kept.setdefault(tuple(tuple(v.shape) for v in feeds.values()), feeds)
    return list(kept.values())


def _with_values(feeds: ort.Feeds, values: Mapping[str, tuple[int, ...]]) -> ort.Feeds:
    """``feeds`` with the profile's values for its shape-tensor inputs (random values would make a
    Reshape fail on what TensorRT is told they are)."""
    out = dict(feeds)
    for name, vals in values.items():
        if name in out:
            out[name] = np.asarray(vals, dtype=out[name].dtype).reshape(out[name].shape)
    return out


def _sample_at(shapes: Mapping[str, tuple[int, ...]], samples: list[ort.Feeds]) -> ort.Feeds | None:
    """A real sample whose inputs have the corner's shapes (inputs not in ``shapes`` are static:
    every sample fits them), or None."""
    for sample in samples:
        if all(tuple(sample[n].shape) == tuple(s) for n, s in shapes.items() if n in sample):
            return sample
    return None


def _rerun_with_plain_integers(sess: object, names: list[str], feeds: ort.Feeds, options: object,
                               given: Collection[str] = (),
                               ) -> tuple[int, ort.Feeds, list[object]] | None:
    """The same shapes with every integer input 0, then 1: (the value, its feeds, the outputs) of
    the first that runs, or None when neither does (or there is no integer input to change). The
    ``given`` inputs keep their values: a shape-tensor input's values are the profile's, and TensorRT
    builds for exactly those."""
    if not any(v.dtype.kind in "iu" for n, v in feeds.items() if n not in given):
        return None
    for fill in (0, 1):
        plain = {n: (np.full_like(v, fill) if v.dtype.kind in "iu" and n not in given else v)
                 for n, v in feeds.items()}
        try:
            return fill, plain, sess.run(names, plain, options)  # type: ignore[attr-defined]
        except Exception:  # ORT raises its own RuntimeException types
            continue
    return None


def _failure(index: int, corner: str, shapes: dict[str, tuple[int, ...]], exc: Exception) -> CornerFailure:
    text = str(exc).strip()
    node = _NODE.search(text)
    op = _OP.search(text)
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first)
    if "Status Message: " in first:  # keep ORT's reason, drop its source location
        first = first.split("Status Message: ", 1)[1]
        first = re.sub(r"^\S+\.(?:h|cc|cpp):\d+ [^)]*\)\s*", "", first)
    return CornerFailure(index, corner, shapes, node.group(1) if node else None,
                         op.group(1) if op else None, first[:400])


def check_corners(model: onnx.ModelProto, profiles: tuple[Profile, ...], *, seed: int = 0,
                  path: Path | None = None, skipped: list[str] | None = None) -> list[CornerFailure]:
    """:func:`run_corners`'s failures (``skipped`` gets the corners not run, and why)."""
    runs = run_corners(model, profiles, seed=seed, path=path)
    if skipped is not None:
        skipped.extend(runs.skipped)
    return list(runs.failures)
