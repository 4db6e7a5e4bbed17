"""Shape inference: ONNX's own first, ONNX Runtime's symbolic one where ONNX's leaves dims unknown.

Also parses the ``--shapes NAME:1x3x224x224,...`` vocabulary (trtexec's) used by
check, rewrite, quantize and build.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Mapping, Sequence

import onnx

from trtconv.errors import UsageError
from trtconv.load.proto import PROTOBUF_LIMIT, approx_size, structure_only
from trtconv.load.read import LoadedModel
from trtconv.onnxutil import iter_graphs

log = logging.getLogger(__name__)

Shape = tuple[int, ...]
MAX_DIM = 2**31 - 1


SCALAR = "scalar"  # ``NAME:scalar`` (or ``NAME:``) is a 0-d shape, as in trtexec
_VALUES = re.compile(r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]")


def parse_shapes(spec: str | None) -> dict[str, Shape]:
    """``"x:1x3x224x224,mask:1x224x224"`` → ``{"x": (1,3,224,224), ...}``.

    Input names may contain ':' (TensorFlow exports: ``input:0``), so the shape is
    what follows the *last* colon. ``scale:scalar`` (or ``scale:``) is a 0-d input.
    Entries that give a shape-tensor input's values (``shp:[3,4]``) are not shapes:
    :func:`parse_shape_values` reads them.
    """
    return parse_shape_spec(spec)[0]


def parse_shape_values(spec: str | None) -> dict[str, tuple[int, ...]]:
    """The values of the shape-tensor inputs in ``spec``: ``"x:2x6,shp:[3,4]"`` → ``{"shp": (3, 4)}``.

    A shape-tensor input (an integer input whose values TensorRT uses as a shape) needs values,
    not a shape, in every profile: written in brackets, flattened in row-major order."""
    return parse_shape_spec(spec)[1]


def parse_shape_spec(spec: str | None) -> tuple[dict[str, Shape], dict[str, tuple[int, ...]]]:
    """(shapes, shape-tensor values) of one ``--shapes`` text; each name given once."""
    shapes: dict[str, Shape] = {}
    values: dict[str, tuple[int, ...]] = {}
    if not spec:
        return shapes, values
    for item in _split_items(spec):
        name, sep, dims = item.partition(":[") if ":[" in item else item.rpartition(":")
        if ":[" in item:
            dims = "[" + dims
        name, dims = name.strip(), dims.strip()
        bracket = _VALUES.fullmatch(dims)
        plain = re.fullmatch(r"\d+(x\d+)*", dims) or dims in ("", SCALAR)
        if not sep or not name or not (bracket or plain):
            raise UsageError(
                f"bad shape {item!r}",
                hint="write NAME:DxDxD, e.g. images:1x3x640x640 (several separated by commas); NAME:scalar for a "
                     "0-d input; NAME:[3,4] for the values of a shape-tensor input",
            )
        if name in shapes or name in values:  # mostly a range written as two shapes
            raise UsageError(f"input {name!r} given twice in shapes",
                             hint="give each input one shape; for a range of sizes, `build` takes --min-shapes, "
                                  "--opt-shapes and --max-shapes (NAME:DxD each)")
        if bracket:
            values[name] = tuple(int(v) for v in (bracket.group(1) or "").split(",") if v.strip())
            continue
        shape = () if dims in ("", SCALAR) else tuple(int(d) for d in dims.split("x"))
        if any(d > MAX_DIM for d in shape):
            raise UsageError(f"bad shape {item!r}: dims must be below 2**31 (TensorRT's dims are int32)")
        shapes[name] = shape
    return shapes, values


def shapes_text(shapes: Mapping[str, Shape], values: Mapping[str, tuple[int, ...]] | None = None) -> str:
    """The ``--shapes`` text of ``shapes`` (and shape-tensor ``values``): what :func:`parse_shape_spec` reads."""
    items = [f"{n}:{'x'.join(map(str, s)) if s else SCALAR}" for n, s in shapes.items()]
    items += [f"{n}:[{','.join(map(str, v))}]" for n, v in (values or {}).items()]
    return ",".join(items)


def _split_items(spec: str) -> list[str]:
    """Split on the commas between entries (not those inside a ``[...]`` of values)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    items.append(spec[start:])
    return [p.strip() for p in items if p.strip()]


def input_dims(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Each graph input's dims: int if fixed, the symbol name if symbolic, None if unknown."""
    inits = {i.name for i in model.graph.initializer}
    out: dict[str, list[int | str | None]] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims: list[int | str | None] = []
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out[vi.name] = dims
    return out


# Dim names exporters make up when nobody named the dim (paddle2onnx, tf2onnx and ONNX Runtime's
# symbolic inference, torch.onnx): they say only "dynamic", so they print as -1, as TensorRT's do.
_MADE_UP_DIM = re.compile(r"(p2o\.)?DynamicDimension\.\d+|unk__\d+|[?*]|s\d+|sym_?\d+|\w*dynamic_axes_\d+",
                          re.IGNORECASE)


def dim_label(dim: int | str | None) -> str:
    """One dim as trtconv prints it: fixed as its size, dynamic as -1 (TensorRT's word) unless a
    person named it (``batch``, ``height``), then as its name."""
    if isinstance(dim, int):
        return str(dim) if dim >= 0 else "-1"
    return dim if dim and not _MADE_UP_DIM.fullmatch(dim) else "-1"


def dims_text(dims: Sequence[int | str | None]) -> str:
    """A tensor's dims as trtconv prints them everywhere: ``[-1, 3, 48, -1]``, ``[batch, 3, height, width]``."""
    return "[" + ", ".join(dim_label(d) for d in dims) + "]"


def shape_example(dims: Sequence[int | str | None], given: Sequence[int] = ()) -> Shape:
    """A shape to suggest for an input of ``dims`` when ``given`` (what the user wrote) does not fit it.

    Fixed dims stay as the model has them. Given one value per dim, the others keep their places; else a value
    of ``given`` equal to the next fixed dim is taken as that dim, the others fill the dynamic dims in order (``1x3x64`` for ``[1, 3, height, width]`` gives
    ``1x3x64x64``: the last such value fills the rest, as images are mostly square). A dynamic dim nothing
    fills is 1 when it leads (a batch), else the last value used, else 1: never 1s where the user said more.
    """
    if len(given) == len(dims):  # the rank is right: each dim keeps its place
        return tuple(d if isinstance(d, int) and d > 0 else g for d, g in zip(dims, given))
    values = list(given)
    out: list[int] = []
    last: int | None = None
    for axis, dim in enumerate(dims):
        if isinstance(dim, int) and dim > 0:
            if values and values[0] == dim:
                values.pop(0)
            out.append(dim)
            continue
        if values:
            last = values.pop(0)
            out.append(last)
        else:
            out.append(1 if axis == 0 and len(dims) > 1 else (last or 1))
    return tuple(out)


def shape_example_text(name: str, dims: Sequence[int | str | None], given: Sequence[int] = ()) -> str:
    """``NAME:1x3x64x64``: :func:`shape_example` as ``--shapes`` writes it."""
    return shapes_text({name: shape_example(dims, given)})


def dynamic_inputs(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Inputs with at least one non-fixed dim: these need an optimization profile."""
    return {k: v for k, v in input_dims(model).items() if any(not isinstance(d, int) for d in v)}


def override_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Shape]) -> onnx.ModelProto:
    """A copy of ``model`` whose named inputs have the given static shapes."""
    dims = input_dims(model)
    for name, shape in shapes.items():
        if name not in dims:
            raise UsageError(
                f"--shapes names {name!r}, which is not an input of the model",
                hint=f"inputs are: {', '.join(dims) or '(none)'}",
            )
        if len(shape) != len(dims[name]) and dims[name]:
            raise UsageError(f"input {name!r} has rank {len(dims[name])}, --shapes gives {len(shape)} dims",
                             hint=f"its dims are {dims_text(dims[name])}: give one value per dim, e.g. --shapes "
                                  f"{shape_example_text(name, dims[name], shape)}")
        for axis, (have, want) in enumerate(zip(dims[name], shape)):
            if isinstance(have, int) and have != want:
                raise UsageError(f"input {name!r} dim {axis} is fixed at {have} in the model; --shapes gives {want}",
                                 hint=f"keep fixed dims as they are: --shapes {shape_example_text(name, dims[name], shape)}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        if vi.name in shapes:
            shp = vi.type.tensor_type.shape
            shp.ClearField("dim")
            for d in shapes[vi.name]:
                shp.dim.add().dim_value = d
    return out


def _negative_dims(model: onnx.ModelProto) -> list[onnx.TensorShapeProto.Dimension]:
    return [d for g in iter_graphs(model.graph) for vi in list(g.value_info) + list(g.output)
            if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim
            if d.HasField("dim_value") and d.dim_value < 0]


def _without_negative_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose stored dims of -1 are unknown dims.

    Some exporters (Paddle's) store -1 for a dynamic dim in value infos; ONNX >= 1.23 takes it as a
    known size that conflicts with what inference derives, and keeps the stale -1 (a first Conv of
    [-1, 8, ?, ?] for a fixed 1x3x48x192 input). The copy is made only where such dims exist."""
    if not _negative_dims(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for d in _negative_dims(out):
        d.Clear()
    return out


def _has_unknown_dims(model: onnx.ModelProto) -> bool:
    for g in iter_graphs(model.graph):
        for vi in list(g.value_info) + list(g.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                return True
            if any(not d.HasField("dim_value") for d in tt.shape.dim):
                return True
    return False


def infer_shapes(
    loaded: LoadedModel, model: onnx.ModelProto | None = None, *, symbolic: bool = True
) -> onnx.ModelProto:
    """Shape-inferred copy of the model; never fails: unknown stays unknown.

    Structural analysis needs shapes only, so this runs on the proto whether or not
    its external weights are loaded; for protos over 2 GB it falls back to the file.
    ``symbolic=False`` skips ONNX Runtime's symbolic pass: ONNX's own gives dtypes and
    ranks, which is all ``check`` needs, and the symbolic pass costs seconds per 1k nodes.
    """
    model = model if model is not None else loaded.proto
    model = _without_negative_dims(model)
    try:
        if approx_size(model) > PROTOBUF_LIMIT:

            with tempfile.NamedTemporaryFile(suffix=".onnx") as tmp:
                onnx.shape_inference.infer_shapes_path(str(loaded.path), tmp.name)
                inferred = onnx.load(tmp.name, load_external_data=False)
        else:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # custom ops or malformed parts: keep what we have
        log.debug("onnx shape inference failed: %s", exc)
        inferred = model
    if symbolic and _has_unknown_dims(inferred) and approx_size(inferred) < PROTOBUF_LIMIT:
        try:
            from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

            sym = SymbolicShapeInference.infer_shapes(inferred, auto_merge=True, guess_output_rank=True)
            if sym is not None:
                inferred = sym
        except Exception as exc:
            log.debug("symbolic shape inference failed: %s", exc)
    return inferred


def value_shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Every known tensor's dims after inference (main graph), by name."""
    out: dict[str, list[int | str | None]] = {}
    g = model.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        out[vi.name] = [
            int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
            for d in vi.type.tensor_type.shape.dim
        ]
    for t in g.initializer:
        out[t.name] = list(t.dims)
    return out


def value_dtypes(model: onnx.ModelProto) -> dict[str, int]:
    """Every known tensor's ONNX element type (TensorProto.DataType) after inference."""
    return graph_dtypes(model.graph)


def graph_dtypes(g: onnx.GraphProto) -> dict[str, int]:
    """Element types declared in one graph (or subgraph): its value infos and initializers."""
    out: dict[str, int] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    for t in g.initializer:
        out[t.name] = t.data_type
    return out


def largest_static_tensor(model: onnx.ModelProto) -> tuple[str, int] | None:
    """The tensor with the most bytes among those whose shape shape inference pins down
    (name, bytes), or None. A few bytes of ConstantOfShape can declare 16 GiB: running
    such a model must fail with a message, not wake the OOM killer. Inference runs on the
    structure alone (weights stripped), so this costs no copy of the weights."""
    stub = structure_only(model)
    if approx_size(stub) > PROTOBUF_LIMIT:
        return None
    try:
        inferred = onnx.shape_inference.infer_shapes(stub, data_prop=True)
    except Exception:
        return None
    best: tuple[str, int] | None = None
    for g in iter_graphs(inferred.graph):
        for vi in (*g.input, *g.value_info, *g.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.elem_type:
                continue
            if not all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim):
                continue
            try:
                itemsize = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
            except (KeyError, TypeError, ValueError):
                continue
            size = itemsize
            for d in tt.shape.dim:
                size *= d.dim_value
            if best is None or size > best[1]:
                best = (vi.name, size)
    return best

