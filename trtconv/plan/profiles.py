"""Optimization profiles from trtexec-style flags, validated against the model before any build.

``--shapes x:1x3x640x640`` is one profile with min = opt = max. ``--min-shapes``,
``--opt-shapes`` and ``--max-shapes`` may each be repeated: the i-th of each forms
profile i. TensorRT checks the same rules, but only minutes into a build and with
a message about "kOPT values for profile 0"; we check them here and name the input.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from trtconv.errors import UsageError
from trtconv.load.shapes import dynamic_inputs, input_dims, parse_shapes
from trtconv.plan.plan import InputRange, Profile, Shape


def _example(name: str, dims: list[int | str | None]) -> str:
    return f"{name}:" + "x".join(str(d) if isinstance(d, int) else "N" for d in dims)


def _check_shape(name: str, shape: Shape, dims: dict[str, list[int | str | None]], flag: str) -> None:
    if name not in dims:
        raise UsageError(
            f"{flag} names {name!r}, which is not an input of the model",
            hint=f"inputs are: {', '.join(dims) or '(none)'}",
        )
    have = dims[name]
    if have and len(shape) != len(have):
        raise UsageError(
            f"{flag}: input {name!r} has rank {len(have)}, the shape given has {len(shape)} dims",
            hint=f"e.g. {_example(name, have)}",
        )
    for axis, (fixed, want) in enumerate(zip(have, shape)):
        if isinstance(fixed, int) and fixed != want:
            raise UsageError(
                f"{flag}: input {name!r} dim {axis} is fixed at {fixed} in the model; {want} was given",
                hint=f"keep fixed dims as they are, e.g. {_example(name, have)}",
            )
    if any(d < 1 for d in shape):
        raise UsageError(f"{flag}: input {name!r} has a zero dim in {list(shape)}")


def build_profiles(
    model: onnx.ModelProto,
    *,
    shapes: str | None = None,
    min_shapes: Sequence[str] = (),
    opt_shapes: Sequence[str] = (),
    max_shapes: Sequence[str] = (),
) -> tuple[Profile, ...]:
    """The profiles to build, or () for a fully static model given no shapes."""
    dims = input_dims(model)
    dynamic = dynamic_inputs(model)
    ranged = bool(min_shapes or opt_shapes or max_shapes)
    if shapes and ranged:
        raise UsageError("give either --shapes or --min-shapes/--opt-shapes/--max-shapes, not both")
    specs: list[tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]]] = []
    if shapes:
        one = parse_shapes(shapes)
        specs.append((one, one, one))
    elif ranged:
        counts = {len(min_shapes), len(opt_shapes), len(max_shapes)}
        if len(counts) != 1:
            raise UsageError(
                f"got {len(min_shapes)} --min-shapes, {len(opt_shapes)} --opt-shapes, {len(max_shapes)} --max-shapes",
                hint="each optimization profile needs all three; repeat the three flags once per profile",
            )
        for lo_spec, opt_spec, hi_spec in zip(min_shapes, opt_shapes, max_shapes):
            specs.append((parse_shapes(lo_spec), parse_shapes(opt_spec), parse_shapes(hi_spec)))
    elif dynamic:
        name, d = next(iter(dynamic.items()))
        raise UsageError(
            f"the model has dynamic inputs ({', '.join(dynamic)}) and no shapes were given",
            hint=f"pass --shapes {_example(name, d)} or --min-shapes/--opt-shapes/--max-shapes",
        )
    profiles = []
    for index, (lo, mid, hi) in enumerate(specs):
        where = f"profile {index}"
        if not (set(lo) == set(mid) == set(hi)):
            raise UsageError(
                f"{where}: --min-shapes, --opt-shapes and --max-shapes name different inputs "
                f"({sorted(lo)} / {sorted(mid)} / {sorted(hi)})"
            )
        for flag, spec in (("--min-shapes", lo), ("--opt-shapes", mid), ("--max-shapes", hi)):
            for name, shape in spec.items():
                _check_shape(name, shape, dims, f"{where} {flag}" if ranged else "--shapes")
        missing = [n for n in dynamic if n not in lo]
        if missing:
            raise UsageError(
                f"{where}: no shape for dynamic input(s) {', '.join(missing)}",
                hint="every dynamic input needs a range in every profile, e.g. "
                + _example(missing[0], dynamic[missing[0]]),
            )
        ranges = []
        for name in lo:
            a, b, c = lo[name], mid[name], hi[name]
            for axis, (x, y, z) in enumerate(zip(a, b, c)):
                if not x <= y <= z:
                    raise UsageError(
                        f"{where}: input {name!r} dim {axis}: min {x}, opt {y}, max {z} is not min <= opt <= max",
                        hint=f"min {list(a)}, opt {list(b)}, max {list(c)}",
                    )
            ranges.append((name, InputRange(a, b, c)))
        profiles.append(Profile(tuple(ranges)))
    return tuple(profiles)
