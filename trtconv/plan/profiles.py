"""Optimization profiles from trtexec-style flags, validated against the model before any build.

``--shapes x:1x3x640x640`` is one profile with min = opt = max. ``--min-shapes``,
``--opt-shapes`` and ``--max-shapes`` may each be repeated: the i-th of each forms
profile i. TensorRT checks the same rules, but only minutes into a build and with
a message about "kOPT values for profile 0"; we check them here and name the input.
"""

from __future__ import annotations

import logging
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import onnx

from trtconv.errors import InvalidModelError, UsageError
from trtconv.load import (
    dim_label,
    dims_text,
    dynamic_inputs,
    input_dims,
    parse_shape_spec,
    shape_example,
    shape_example_text,
    shapes_text,
)
from trtconv.plan.build_plan import InputRange, Profile, Shape
from trtconv.plan.corners import does_not_fit
from trtconv.reference import ort

log = logging.getLogger(__name__)


def _check_shape(name: str, shape: Shape, dims: dict[str, list[int | str | None]], flag: str,
                 suggest: Callable[[str, str], str]) -> None:
    """``suggest(name, example)``: the hint that offers ``example`` (``NAME:DxD``) for that input."""
    if name not in dims:
        raise UsageError(
            f"{flag} names {name!r}, which is not an input of the model",
            hint=f"inputs are: {', '.join(dims) or '(none)'}",
        )
    have = dims[name]
    if have and len(shape) != len(have):
        raise UsageError(
            f"{flag}: input {name!r} has rank {len(have)} {dims_text(have)}, the shape given has {len(shape)} dims",
            hint=suggest(name, shape_example_text(name, have, shape)),
        )
    for axis, (fixed, want) in enumerate(zip(have, shape)):
        if isinstance(fixed, int) and fixed != want:
            raise UsageError(
                f"{flag}: input {name!r} dim {axis} is fixed at {fixed} in the model; {want} was given",
                hint="keep fixed dims as they are: " + suggest(name, shape_example_text(name, have, shape)),
            )
    if any(d < 1 for d in shape):
        raise UsageError(f"{flag}: input {name!r} has a zero dim in {list(shape)}",
                         hint="every dim is at least 1: " + suggest(name, shape_example_text(name, have, tuple(max(d, 1) for d in shape))))


def build_profiles(
    model: onnx.ModelProto,
    *,
    shapes: str | None = None,
    min_shapes: Sequence[str] = (),
    opt_shapes: Sequence[str] = (),
    max_shapes: Sequence[str] = (),
    sample_shapes: Iterable[Mapping[str, Shape]] | None = None,
    sample_values: Iterable[Mapping[str, tuple[int, ...]]] | None = None,
    required: bool = True,
    command: str = "trtconv build MODEL -o ENGINE",
) -> tuple[Profile, ...]:
    """The profiles to build, or () for a fully static model given no shapes.

    Without shapes for a dynamic model, as Polygraphy and trtexec users expect: the profile
    spans ``sample_shapes`` (min/opt/max over the calibration samples) when given; else a
    dynamic leading (batch) dim is 1, with a warning; else, if a profile is ``required``, a
    usage error whose hint is ``command`` with shapes the graph was seen to run at
    (``required=False``: no profile, for ``--prepare-only``).

    Shape-tensor inputs get values (``--shapes shp:[3,4]``), or, where none are given, the span of
    ``sample_values`` (their values in the samples); a static model with such values gets one profile.
    """
    dims = input_dims(model)
    dynamic = dynamic_inputs(model)
    ranged = bool(min_shapes or opt_shapes or max_shapes)
    if shapes and ranged:
        raise UsageError("give either --shapes or --min-shapes/--opt-shapes/--max-shapes, not both")
    specs: list[tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]]] = []
    valued: list[tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]]] = []
    if shapes:
        one, values = parse_shape_spec(shapes)
        specs.append((one, one, one))
        valued.append((values, values, values))
    elif ranged:
        counts = {len(min_shapes), len(opt_shapes), len(max_shapes)}
        if len(counts) != 1:
            raise UsageError(
                f"got {len(min_shapes)} --min-shapes, {len(opt_shapes)} --opt-shapes, {len(max_shapes)} --max-shapes",
                hint="each optimization profile needs all three; repeat the three flags once per profile",
            )
        for lo_spec, opt_spec, hi_spec in zip(min_shapes, opt_shapes, max_shapes):
            (lo, vlo), (mid, vmid), (hi, vhi) = map(parse_shape_spec, (lo_spec, opt_spec, hi_spec))
            specs.append((lo, mid, hi))
            valued.append((vlo, vmid, vhi))
    elif dynamic:
        spec = _default_spec(model, dynamic, sample_shapes, required, command)
        if spec is None:
            return ()
        specs.append(spec)
    if not any(v[0] for v in valued) and sample_values:
        span = _values_span(sample_values)
        if span is not None:
            announce(span, "the samples of --calib-data (values of shape-tensor inputs)")
            specs = specs or [({}, {}, {})]
            valued = [span] * len(specs)
    profiles = []
    for index, (lo, mid, hi) in enumerate(specs):
        where = f"profile {index}"
        if not (set(lo) == set(mid) == set(hi)):
            raise UsageError(
                f"{where}: --min-shapes, --opt-shapes and --max-shapes name different inputs "
                f"({sorted(lo)} / {sorted(mid)} / {sorted(hi)})"
            )
        for flag, corner in (("--min-shapes", lo), ("--opt-shapes", mid), ("--max-shapes", hi)):
            for name, shape in corner.items():
                _check_shape(name, shape, dims, f"{where} {flag}" if ranged else "--shapes",
                             _suggest(command, corner, valued[index][0] if valued else {}, ranged))
        _values_only_for_integers(model, lo, valued[index][0] if index < len(valued) else {}, dims, command, ranged)
        missing = [n for n in dynamic if n not in lo]
        if missing:
            raise UsageError(f"{where}: no shape for dynamic input(s) {', '.join(missing)}",
                             hint=_missing_hint(dynamic, missing, (lo, mid, hi), command,
                                                valued[index][0] if valued else {}, ranged))
        value_ranges = _value_ranges(where, valued[index] if index < len(valued) else ({}, {}, {}), dims, lo)
        profiles.append(Profile(tuple(_ranges(where, lo, mid, hi)), value_ranges))
    return tuple(profiles)


def _suggest(command: str, spec: Mapping[str, Shape], values: Mapping[str, Shape], ranged: bool
             ) -> Callable[[str, str], str]:
    """How a bad shape's hint offers a fix: for ``--shapes``, the command with the whole ``--shapes`` again
    (that input's entry replaced), runnable as printed; for a range flag, the entry alone."""
    def suggest(name: str, example: str) -> str:
        if ranged:
            return f"e.g. {example}"
        fixed = dict(parse_shape_spec(example)[0])
        entries = {n: fixed[n] if n in fixed else s for n, s in spec.items()}
        return f"{command} --shapes {shlex.quote(shapes_text(entries, values))}"
    return suggest


def _missing_hint(dynamic: Mapping[str, list[int | str | None]], missing: Sequence[str],
                  corners: tuple[Mapping[str, Shape], Mapping[str, Shape], Mapping[str, Shape]], command: str,
                  values: Mapping[str, Shape], ranged: bool) -> str:
    """What to add for dynamic inputs a profile left out: ``--shapes``, the whole command; a range, each corner."""
    if not ranged:
        return _suggest(command, _filled(dynamic, corners[1], missing), values, False)(missing[0], "")
    return "every dynamic input needs a range in every profile: add " + "; ".join(
        f"{flag} {shapes_text({n: _filled(dynamic, c, missing)[n] for n in missing})}"
        for flag, c in zip(("--min-shapes", "--opt-shapes", "--max-shapes"), corners))


def _filled(dynamic: Mapping[str, list[int | str | None]], corner: Mapping[str, Shape], missing: Sequence[str]
            ) -> dict[str, Shape]:
    """``corner`` with a shape for each ``missing`` input: a dim named in a given input is that size there too
    (``batch``), the rest as :func:`shape_example` fills them."""
    named = _named_sizes(dynamic, corner)
    return {**corner, **{n: shape_example([named.get(d, d) if isinstance(d, str) else d for d in dynamic[n]])
                         for n in missing}}


def _named_sizes(dynamic: Mapping[str, list[int | str | None]], given: Mapping[str, Shape]) -> dict[str, int]:
    """The sizes the given shapes put on the model's named dims (``batch`` -> 4): one name, one size."""
    sizes: dict[str, int] = {}
    for name, shape in given.items():
        for dim, size in zip(dynamic.get(name, ()), shape):
            if isinstance(dim, str) and dim:
                sizes.setdefault(dim, size)
    return sizes


def _ranges(where: str, lo: Mapping[str, Shape], mid: Mapping[str, Shape], hi: Mapping[str, Shape]
            ) -> list[tuple[str, InputRange]]:
    """min <= opt <= max, element by element, for each input of one profile."""
    ranges = []
    for name in lo:
        a, b, c = lo[name], mid[name], hi[name]
        if not len(a) == len(b) == len(c):
            raise UsageError(f"{where}: input {name!r} has {len(a)}, {len(b)} and {len(c)} entries at min, opt, max")
        for axis, (x, y, z) in enumerate(zip(a, b, c)):
            if not x <= y <= z:
                raise UsageError(
                    f"{where}: input {name!r} dim {axis}: min {x}, opt {y}, max {z} is not min <= opt <= max",
                    hint=f"min {list(a)}, opt {list(b)}, max {list(c)}",
                )
        ranges.append((name, InputRange(a, b, c)))
    return ranges


def _values_only_for_integers(model: onnx.ModelProto, spec: Mapping[str, Shape], values: Mapping[str, Shape],
                              dims: Mapping[str, list[int | str | None]], command: str, ranged: bool) -> None:
    """``NAME:[v,...]`` gives the values of a shape-tensor input, which is an integer input: for a data input of
    another type (``--shapes 'x:[1,2]'`` on an image) say that, and offer its shape (for ``--shapes`` the whole
    command, runnable as printed), not the values it would hold."""
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    integers = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
    for name in values:
        if name in types and types[name] not in integers:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(types[name]).name if types[name] else "untyped"
            example = shape_example_text(name, dims.get(name) or [])
            if ranged:
                hint = f"give its shape in each of --min-shapes/--opt-shapes/--max-shapes, e.g. {example}"
            else:
                entries = {**spec, **parse_shape_spec(example)[0]}
                rest = {n: v for n, v in values.items() if n != name}
                hint = f"{command} --shapes {shlex.quote(shapes_text(entries, rest))}"
            raise UsageError(f"{'--shapes' if not ranged else 'a shape flag'} gives {name!r} values ({name}:[...]), "
                             f"but it is a {dtype} data input: values are for integer shape-tensor inputs; a data "
                             "input takes a shape", hint=hint)


def _value_ranges(where: str, valued: tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]],
                  dims: Mapping[str, list[int | str | None]], shapes: Mapping[str, Shape]
                  ) -> tuple[tuple[str, InputRange], ...]:
    """The shape-tensor inputs' values of one profile: each an integer input, as many values as elements."""
    lo, mid, hi = valued
    if not (set(lo) == set(mid) == set(hi)):
        raise UsageError(f"{where}: --min-shapes, --opt-shapes and --max-shapes give values for different inputs "
                         f"({sorted(lo)} / {sorted(mid)} / {sorted(hi)})")
    for name, vals in lo.items():
        if name not in dims:
            raise UsageError(f"--shapes gives values for {name!r}, which is not an input of the model",
                             hint=f"inputs are: {', '.join(dims) or '(none)'}")
        have = shapes.get(name) or dims[name]
        fixed = [d for d in have if isinstance(d, int)]
        if len(fixed) == len(have):
            count = 1
            for d in fixed:
                count *= d
            if count != len(vals):
                raise UsageError(f"{where}: input {name!r} holds {count} value(s) (shape {list(have)}); "
                                 f"{len(vals)} were given", hint=f"e.g. {name}:[{','.join(['1'] * count)}]")
    return tuple(_ranges(where + " values", lo, mid, hi))


def _values_span(samples: Iterable[Mapping[str, tuple[int, ...]]]
                 ) -> tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]] | None:
    """min/opt/max of shape-tensor input values over the samples (element by element), or None."""
    seen = [dict(s) for s in samples if s]
    if not seen or any(set(s) != set(seen[0]) for s in seen):
        return None
    if any(len({len(s[n]) for s in seen}) != 1 for n in seen[0]):
        return None
    return _span(seen)


def _default_spec(model: onnx.ModelProto, dynamic: dict[str, list[int | str | None]],
                  sample_shapes: Iterable[Mapping[str, Shape]] | None, required: bool, command: str
                  ) -> tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]] | None:
    """The profile taken when no shapes were given (see :func:`build_profiles`), or None."""
    if sample_shapes is not None:
        seen = [{n: tuple(int(d) for d in s[n]) for n in dynamic if n in s} for s in sample_shapes]
        if seen and all(set(s) == set(dynamic) for s in seen):
            spec = _span(seen)
            announce(spec, f"the {len(seen)} sample(s) of --calib-data (no shapes were given)")
            _warn_narrowed(spec, dynamic)
            return spec
    batch = {n: tuple([1, *d[1:]]) for n, d in dynamic.items()
             if len(d) >= 2 and not isinstance(d[0], int) and all(isinstance(x, int) for x in d[1:])}
    if len(batch) == len(dynamic):
        one = {n: tuple(int(x) for x in s) for n, s in batch.items()}
        announce((one, one, one), "the model, its dynamic batch dim set to 1 (no shapes were given)")
        return one, one, one
    if not required:
        return None
    raise UsageError(f"the model has dynamic inputs ({', '.join(dynamic)}) and no shapes were given",
                     hint=shapes_hint(model, dynamic, command))


def _dims_text(lo: Shape, mid: Shape, hi: Shape) -> str:
    if lo == hi:
        return "x".join(map(str, lo))
    return f"{'x'.join(map(str, lo))}..{'x'.join(map(str, hi))} (opt {'x'.join(map(str, mid))})"


def announce(spec: tuple[Mapping[str, Shape], Mapping[str, Shape], Mapping[str, Shape]], source: str,
             index: int = 0) -> None:
    """One stderr line: a profile trtconv chose, and where it came from. The engine accepts only
    these shapes: a derived profile is never taken silently."""
    lo, mid, hi = spec
    ranges = ", ".join(f"{n} {_dims_text(lo[n], mid[n], hi[n])}" for n in lo)
    log.warning("profile %d taken from %s: %s (give --shapes or --min-shapes/--opt-shapes/--max-shapes to choose "
                "it)", index, source, ranges)


def _warn_narrowed(spec: tuple[Mapping[str, Shape], Mapping[str, Shape], Mapping[str, Shape]],
                   dynamic: Mapping[str, list[int | str | None]]) -> None:
    """A warning per dynamic dim other than the batch that the samples narrowed to their own range
    (a sequence length, an image size): the engine will refuse every other size there."""
    lo, _, hi = spec
    for name, dims in dynamic.items():
        for axis, dim in enumerate(dims):
            if axis == 0 or isinstance(dim, int):
                continue
            label = f" ({dim_label(dim)})" if dim_label(dim) != "-1" else ""
            log.warning("input %r dim %d%s is dynamic in the model, but the profile from --calib-data spans only "
                        "%d..%d, the sizes in the samples: the engine refuses any other (give --min-shapes/"
                        "--opt-shapes/--max-shapes for the range you need)", name, axis, label,
                        lo[name][axis], hi[name][axis])


def _span(seen: list[dict[str, Shape]]) -> tuple[dict[str, Shape], dict[str, Shape], dict[str, Shape]]:
    """min/opt/max over the samples' shapes: elementwise min and max, opt the most common (ties: largest)."""
    names = list(seen[0])
    lo = {n: tuple(min(dims) for dims in zip(*(s[n] for s in seen))) for n in names}
    hi = {n: tuple(max(dims) for dims in zip(*(s[n] for s in seen))) for n in names}
    counts = Counter(tuple(s[n] for n in names) for s in seen)
    best = max(counts, key=lambda shapes: (counts[shapes], shapes))
    return lo, dict(zip(names, best)), hi


# Sizes tried for a dynamic dim that is not a batch, in order: the first the graph runs at is the hint's
# opt; min and max are the smallest and largest of the others it runs at (each corner run once).
_OPT = (224, 256, 320, 512, 640, 128, 64, 32, 16, 8)
_MIN = (32, 16, 8, 64, 128)
_MAX = (640, 512, 320, 256)


def _text(shapes: Mapping[str, Shape]) -> str:
    return ",".join(f"{n}:{'x'.join(map(str, s))}" for n, s in shapes.items())


def shapes_hint(model: onnx.ModelProto, dynamic: Mapping[str, list[int | str | None]], command: str) -> str:
    """The hint for a dynamic model given no shapes: ``command`` with shapes the graph runs at on ONNX
    Runtime. Batch dims only: ``--shapes`` with batch 1. Other dynamic dims (an image's H and W, a
    sequence): a min/opt/max range, said plainly to be placeholders, since the model does not say
    which sizes the data has (an OCR detector fixed at 224x224 would refuse every real page). What is
    said after the command is a shell comment (``# ...``): the whole line pastes and runs."""
    fill, sized, runs = _filler(model, dynamic)
    if not sized:
        return (f"{command} --shapes {_text(fill(1))}  # or --min-shapes/--opt-shapes/--max-shapes for a range of batch "
                "sizes, or --calib-data DIR to take the range from the samples")
    opt = next((size for size in _OPT if runs(fill(size))), _OPT[0])
    low = next((size for size in _MIN if size <= opt and runs(fill(size))), opt)
    high = next((size for size in _MAX if size >= opt and runs(fill(size))), opt)
    return (f"{command} --min-shapes {_text(fill(low))} --opt-shapes {_text(fill(opt))} --max-shapes "
            f"{_text(fill(high))}  # placeholders: the model does not say its sizes ({_sized_text(sized)}), these are "
            "sizes its graph runs at on ONNX Runtime; replace them with the smallest, typical and largest your data "
            "has, as the engine refuses any other; or --calib-data DIR to take the range from the samples")


def fixed_shapes_hint(model: onnx.ModelProto, dynamic: Mapping[str, list[int | str | None]], command: str,
                      given: str = "") -> str:
    """The hint where one shape per input is needed (random samples, a reference run): ``command`` with a
    ``--shapes`` the graph runs at on ONNX Runtime, batch dims 1, other dynamic dims said to be placeholders in a
    shell comment: the line runs as printed. ``given``: the ``--shapes`` text the command already had (its
    inputs lead; ``dynamic`` holds the others)."""
    fill, sized, runs = _filler(model, dynamic)
    lead = f"{command} --shapes {given + ',' if given else ''}"
    if not sized:
        return f"{lead}{_text(fill(1))}  # 1: a batch of one"
    opt = next((size for size in _OPT if runs(fill(size))), _OPT[0])
    return (f"{lead}{_text(fill(opt))}  # placeholders: the model does not say its sizes "
            f"({_sized_text(sized)}); this one its graph runs at on ONNX Runtime, replace it with your data's")


def _filler(model: onnx.ModelProto, dynamic: Mapping[str, list[int | str | None]]
            ) -> tuple[Callable[[int], dict[str, Shape]], dict[str, list[int]], Callable[[Mapping[str, Shape]], bool]]:
    """(shapes with batch dims 1 and every other dynamic dim ``size``; each input's non-batch dynamic axes;
    whether the graph runs at given shapes)."""
    batch_names = {dims[0] for dims in dynamic.values() if len(dims) >= 2 and isinstance(dims[0], str) and dims[0]}

    def is_batch(axis: int, dims: list[int | str | None], d: int | str | None) -> bool:
        return d in batch_names if isinstance(d, str) and d else axis == 0 and len(dims) >= 2

    sized = {n: [a for a, d in enumerate(dims) if not isinstance(d, int) and not is_batch(a, dims, d)]
             for n, dims in dynamic.items()}
    sized = {n: axes for n, axes in sized.items() if axes}

    # A named dim is one size wherever it appears (ONNX Runtime refuses "batch" = 1 in one input and
    # 224 in another): a batch if it leads any input of rank >= 2, else a size.
    def fill(size: int) -> dict[str, Shape]:
        return {n: tuple(d if isinstance(d, int) else (1 if is_batch(a, dims, d) else size) for a, d in enumerate(dims))
                for n, dims in dynamic.items()}

    return fill, sized, (_runner(model) if sized else (lambda shapes: True))


def _sized_text(sized: Mapping[str, list[int]]) -> str:
    return "; ".join(f"{n} dim{'s' if len(axes) > 1 else ''} {', '.join(map(str, axes))}" for n, axes in sized.items())


def _runner(model: onnx.ModelProto) -> Callable[[Mapping[str, Shape]], bool]:
    """Whether the graph runs at given input shapes on ONNX Runtime (random inputs); always True where
    ONNX Runtime cannot load the model at all (the hint's sizes are then untested placeholders)."""
    try:
        sess = ort.session(model)
    except InvalidModelError:
        return lambda shapes: True

    def runs(shapes: Mapping[str, Shape]) -> bool:
        if does_not_fit(model, dict(shapes)):
            return False
        try:
            ort.run(sess, ort.random_feeds(model, dict(shapes), seed=0))
        except (InvalidModelError, UsageError):
            return False
        return True

    return runs
