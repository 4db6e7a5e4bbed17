"""How large an integer input's values may be: the rows of the tables it indexes.

Synthetic inputs must be valid for the graph they feed. A ``token_type_ids`` input that
selects a row of a 2-row embedding (``Gather`` on an initializer) fails in ONNX Runtime on
a value of 2, while TensorRT builds the model without looking at values at all; a check
that draws 0..3 there would be stricter than TensorRT.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from trtconv.onnxutil.domains import is_default_domain

# Ops whose output holds the same integer values as their first input, rearranged or retyped:
# a value that indexes a table after them was one of the input's values.
_PASS_THROUGH = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose",
                           "Expand", "Slice", "Tile", "Gather"})


def _table_dims(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Dims of every constant (initializer or Constant node) by name: dims only, no weight bytes read."""
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and is_default_domain(node.domain):
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    dims[node.output[0]] = list(a.t.dims)
    return dims


def index_limits(model: onnx.ModelProto) -> dict[str, int]:
    """For each graph input whose values index a constant table (the indices of a ``Gather`` on an
    initializer, directly or through Cast/Unsqueeze/Reshape/...), the number of rows of the
    smallest such table: its values must lie in ``[0, limit)``. Inputs indexing nothing are absent."""
    graph = model.graph
    tables = _table_dims(graph)
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    limits: dict[str, int] = {}
    for inp in graph.input:
        if inp.name in tables:
            continue
        limit = _limit_from(inp.name, consumers, tables)
        if limit is not None:
            limits[inp.name] = limit
    return limits


def _limit_from(start: str, consumers: dict[str, list[onnx.NodeProto]],
                tables: dict[str, list[int]]) -> int | None:
    """The smallest table row count ``start``'s values reach as Gather indices, or None."""
    best: int | None = None
    todo, seen = [start], {start}
    while todo:
        name = todo.pop()
        for node in consumers.get(name, ()):
            if not is_default_domain(node.domain) or node.op_type not in _PASS_THROUGH:
                continue
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
                data = tables.get(node.input[0])
                if data:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    rows = data[axis % len(data)]
                    best = rows if best is None else min(best, rows)
                continue  # the gathered values are the table's, not the input's
            if node.input[0] != name:
                continue  # a shape, axes or starts operand: not the values themselves
            for out in node.output:
                if out and out not in seen:
                    seen.add(out)
                    todo.append(out)
    return best


# (op, input index) whose values are a shape, sizes or a count: where TensorRT makes a shape tensor.
_SHAPE_OPERANDS = frozenset({("Reshape", 1), ("Expand", 1), ("Tile", 1), ("ConstantOfShape", 0), ("Slice", 1),
                             ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Resize", 3), ("Range", 0), ("Range", 1),
                             ("Range", 2), ("TopK", 1), ("Pad", 1), ("OneHot", 1), ("Upsample", 1)})
# Ops whose output carries none of an input's values (only its shape or type).
_VALUELESS = frozenset({"Shape", "Size", "EyeLike", "RandomNormalLike", "RandomUniformLike"})
_INTEGER = frozenset({onnx.TensorProto.INT32, onnx.TensorProto.INT64})


def shape_value_inputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """The integer graph inputs of static shape whose values reach a shape operand (a Reshape's
    shape, an Expand's or ConstantOfShape's, Slice bounds, a Range): TensorRT's parser makes them
    shape tensors, which need values (not a shape) in an optimization profile. A guess from the
    graph, used to read those values from sample data; the parser's own verdict decides the build."""
    graph = model.graph
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                consumers[name].append(node)
    inits = {t.name for t in graph.initializer}
    found = []
    for inp in graph.input:
        tt = inp.type.tensor_type
        if inp.name in inits or tt.elem_type not in _INTEGER or not tt.HasField("shape"):
            continue
        if not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        if _reaches_shape_operand(inp.name, consumers):
            found.append(inp.name)
    return tuple(found)


def _reaches_shape_operand(start: str, consumers: dict[str, list[onnx.NodeProto]]) -> bool:
    todo, seen = [start], {start}
    while todo:
        name = todo.pop()
        for node in consumers.get(name, ()):
            if not is_default_domain(node.domain) or node.op_type in _VALUELESS:
                continue
            if any((node.op_type, i) in _SHAPE_OPERANDS for i, x in enumerate(node.input) if x == name):
                return True
            for out in node.output:
                if out and out not in seen:
                    seen.add(out)
                    todo.append(out)
    return False


def length_inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Integer inputs that read as the lengths of a batch of sequences: rank 1, their one dim named as
    the batch dim (dim 0) of a float input of rank 2 or more (``waveforms_lens: [batch]`` beside
    ``waveforms: [batch, N]``) -> that input's name.

    Synthetic data drawn as small integers makes such a model mask almost everything: onnx-asr's
    WeSpeaker front-end returns all zeros for a length of 2, and a proof on those zeros compares
    nothing. Only named dims are matched: a static ``[1]`` beside ``[1, N]`` says nothing."""
    inits = {t.name for t in model.graph.initializer}
    floats: dict[str, str] = {}
    ints: dict[str, str] = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_param for d in tt.shape.dim] if tt.HasField("shape") else []
        kind = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).kind if tt.elem_type else ""
        if kind == "f" and len(dims) >= 2 and dims[0]:
            floats.setdefault(dims[0], vi.name)
        elif kind and kind in "iu" and len(dims) == 1 and dims[0]:
            ints[vi.name] = dims[0]
    return {name: floats[dim] for name, dim in ints.items() if dim in floats}


SMALL_INTS = 4  # synthetic integer inputs are drawn from 0 .. SMALL_INTS - 1 (or fewer: a table's rows)


def integer_values(rng: np.random.Generator, name: str, shape: Sequence[int], dtype: np.dtype, *,
                   limits: Mapping[str, int], lengths: Mapping[str, str],
                   shapes: Mapping[str, Sequence[int]]) -> np.ndarray:
    """Synthetic values for integer input ``name`` of ``shape``: a sequence length (``lengths``, beside its
    sequences' input in ``shapes``) from half to all of their longest dim after the batch; else small integers,
    below the rows of the table it indexes (``limits``). One rule for every synthetic feed (proofs, pre-flight,
    ``--random-data``)."""
    seq = shapes.get(lengths.get(name, ""), ())
    if name in lengths and name not in limits and len(seq) > 1:
        longest = max(seq[1:])
        return np.asarray(rng.integers(max(1, (longest + 1) // 2), longest + 1, size=shape), dtype=dtype)
    return np.asarray(rng.integers(0, max(1, min(SMALL_INTS, limits.get(name, SMALL_INTS))), size=shape), dtype=dtype)
