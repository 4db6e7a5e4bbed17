"""``--random-data``: seeded samples for a model's inputs, drawn as every synthetic feed is (floats normal; integers
below the table an input indexes, or lengths of the sequences beside it: :func:`~trtconv.onnxutil.integer_values`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from trtconv.errors import ShapesNeeded, UsageError
from trtconv.load import dims_text, shape_example_text
from trtconv.onnxutil import integer_values
from trtconv.samples.sample_checks import InputSpec

if TYPE_CHECKING:
    from trtconv.samples.sources import SampleSource


def random_samples(source: SampleSource, inputs: Mapping[str, InputSpec]) -> Iterator[tuple[str, Any]]:
    """``source.limit`` samples (origin label, inputs) at the source's ``--shapes``; a dynamic input without one is
    :class:`~trtconv.errors.ShapesNeeded`, a shape that does not fit its dims a usage error."""
    shapes = dict(source.shapes)
    unknown = [n for n in shapes if n not in inputs]
    if unknown:
        raise UsageError(f"--shapes names {unknown[0]!r}, which is not an input of the model",
                         hint=f"inputs are: {', '.join(inputs) or '(none)'}")
    concrete: dict[str, tuple[int, ...]] = {}
    for name, spec in inputs.items():
        if name in shapes:
            concrete[name] = tuple(shapes[name])
            fits = len(spec.dims) == len(concrete[name]) and all(
                not isinstance(d, int) or d == g for d, g in zip(spec.dims, concrete[name]))
            if not fits:  # a --shapes mistake, said as one (exit 2), not as bad data
                raise UsageError(f"--shapes gives input {name!r} the shape {'x'.join(map(str, concrete[name]))}, "
                                 f"which does not fit its dims {dims_text(spec.dims)}",
                                 hint=f"give one value per dim, fixed dims as they are, e.g. --shapes "
                                      f"{shape_example_text(name, spec.dims, concrete[name])}")
        elif all(isinstance(d, int) for d in spec.dims):
            concrete[name] = tuple(int(d) for d in spec.dims)  # type: ignore[arg-type]
        else:
            example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.dims)
            open_ = {n: sp.dims for n, sp in inputs.items()
                     if n not in shapes and not all(isinstance(d, int) for d in sp.dims)}
            raise ShapesNeeded(f"random data: input {name!r} has dynamic dims {dims_text(spec.dims)} and no shape "
                               "was given for it", open_,
                               hint=f"give its shape with --shapes {name}:{example}, N a size of your data")
    rng = np.random.default_rng(source.seed)
    limits, lengths = dict(source.limits), dict(source.lengths)
    for i in range(source.limit):
        sample = {}
        for name, spec in inputs.items():
            try:
                if spec.dtype.kind == "f":
                    sample[name] = np.asarray(rng.standard_normal(concrete[name]), dtype=spec.dtype)  # 0-d: an array
                elif spec.dtype.kind in "iu":
                    sample[name] = integer_values(rng, name, concrete[name], spec.dtype, limits=limits,
                                                  lengths=lengths, shapes=concrete)
                else:
                    sample[name] = np.asarray(rng.integers(0, 2, size=concrete[name]), dtype=spec.dtype)
            except MemoryError as exc:
                raise UsageError(f"random data: input {name!r} of shape {list(concrete[name])} does not fit in memory",
                                 hint="give smaller --shapes") from exc
        yield f"random sample {i}", sample
