"""Where Q/DQ pairs go for TensorRT, and putting them there (subgraphs included).

TensorRT's explicit quantization runs a layer in INT8 when its inputs come through
QuantizeLinear → DequantizeLinear; it fuses the pair into the consumer. So the pairs go
on the *inputs* of the layers TensorRT computes in INT8 — Conv, ConvTranspose, Gemm,
MatMul — with per-channel symmetric weights and per-tensor symmetric activations
(zero point 0), plus the skip input of a residual Add so TensorRT can fuse the Add into
the Conv before it. Everything else computes in floating point; numerically sensitive
ops (sigmoid/softmax heads, normalisations, Resize) get no Q/DQ by design.

Unlike ONNX Runtime's and ModelOpt's quantizers, this walks into ``If``/``Loop``/``Scan``
bodies: the placement, the calibration outputs (:mod:`trtconv.precision.expose`) and the
inserted nodes all reach subgraphs, with weights that live in ``Constant`` nodes there.
Who produces what, and which names are constants, comes from the shared
:class:`trtconv.onnxutil.graph.GraphView`; insertion ends in its :func:`~trtconv.onnxutil.graph.cleanup`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtconv.load import LAZY_TENSOR_MIN, is_lazy, spill_tensor, structure_only
from trtconv.onnxutil import GraphView, cleanup, fresh_name, is_default_domain, iter_graphs, model_names

QUANTIZABLE = ("Conv", "ConvTranspose", "Gemm", "MatMul")
SENSITIVE = {
    "Sigmoid": "sigmoid",  # "sigmoid output head" where its output is the graph's (_sensitive_reason)
    "Softmax": "softmax",
    "LogSoftmax": "softmax",
    "BatchNormalization": "normalization",
    "LayerNormalization": "normalization",
    "InstanceNormalization": "normalization",
    "GroupNormalization": "normalization",
    "RMSNormalization": "normalization",
    "Resize": "Resize interpolation",
    "Upsample": "Resize interpolation",
}
Q_DOMAIN = ""
SHAPE_ONLY = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")


@dataclass(frozen=True)
class Placement:
    """One Q/DQ on one input of one node (scale filled in once known)."""

    graph: str  # "main" or the path of a subgraph, e.g. "If_0/then_branch"
    node: str
    op_type: str
    input_index: int
    tensor: str
    kind: str  # "activation" | "weight"
    reason: str
    axis: int | None = None  # per-channel axis of a weight
    scale: float | None = None  # activation scale (weights: per channel, not listed)

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Skip:
    graph: str
    node: str
    op_type: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Plan:
    placements: tuple[Placement, ...]
    skips: tuple[Skip, ...]

    def activation_tensors(self) -> list[str]:
        return sorted({p.tensor for p in self.placements if p.kind == "activation"})


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def weight_axis(node: onnx.NodeProto, input_index: int, ndim: int) -> int | None:
    """The output-channel axis TensorRT expects for per-channel weights of rank ``ndim``; None means per-tensor."""
    op = node.op_type
    if op == "Conv" and input_index == 1 and ndim >= 3:
        return 0
    if op == "ConvTranspose" and input_index == 1 and ndim >= 3:
        return 1 if _attr(node, "group", 1) == 1 else None
    if op == "Gemm" and input_index == 1 and ndim == 2:
        return 0 if _attr(node, "transB", 0) else 1
    if op == "MatMul" and input_index == 1 and ndim == 2:
        return 1
    return None


# ----------------------------------------------------------------------------- placement


def _excluded(node: onnx.NodeProto, patterns: Sequence[str]) -> str | None:
    for pat in patterns:
        if fnmatch.fnmatchcase(node.name, pat) or fnmatch.fnmatchcase(node.op_type, pat):
            return pat
    return None


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type that ONNX shape inference or the initializers give, subgraphs included."""
    try:
        inferred = onnx.shape_inference.infer_shapes(structure_only(model))  # types need no weights
    except Exception:
        inferred = model
    types: dict[str, int] = {}
    for g in iter_graphs(inferred.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    for g in iter_graphs(model.graph):
        types.update((t.name, t.data_type) for t in g.initializer)
    return types


def _not_float(types: Mapping[str, int], name: str) -> bool:
    """Known to be something other than float32 (unknown types pass)."""
    return name in types and types[name] != TensorProto.FLOAT


def _conv_like_producer(view: GraphView, name: str) -> bool:
    op = view.producer_op(name)
    if op in ("Conv", "ConvTranspose"):
        return True
    if op == "BatchNormalization":  # Conv -> BN folds into the Conv in TensorRT
        bn = view.producer(name).node  # type: ignore[union-attr]
        return view.producer_op(bn.input[0]) in ("Conv", "ConvTranspose")
    return False


def _position(view: GraphView, name: str) -> int:
    """Where the producer of ``name`` stands in its graph (-1: nothing in the model computes it)."""
    site = view.producer(name)
    return -1 if site is None else site.index


def _sensitive_reason(graph: onnx.GraphProto, node: onnx.NodeProto) -> str:
    """What the skip says of a sensitive op: a Sigmoid is called a head only where it ends its graph (most
    Sigmoids sit inside SiLU/Swish activations or gates, where "output head" would be untrue)."""
    if node.op_type == "Sigmoid" and set(node.output) & {o.name for o in graph.output}:
        return "sigmoid output head"
    return SENSITIVE[node.op_type]


def plan_qdq(
    model: onnx.ModelProto,
    *,
    exclude: Sequence[str] = (),
    residual_add: bool = True,
) -> Plan:
    """Decide every Q/DQ (and every deliberate non-Q/DQ) with its reason; touches nothing."""
    view = GraphView(model)
    types = element_types(model)
    placements: list[Placement] = []
    skips: list[Skip] = []
    for path, g in view.graphs:
        for node in g.node:
            op = node.op_type
            name = node.name or f"{op}({', '.join(node.output)})"
            relevant = op in QUANTIZABLE or op == "Add" or op in SENSITIVE
            if not relevant or not is_default_domain(node.domain):
                continue
            pat = _excluded(node, exclude)
            if pat is not None and (op in QUANTIZABLE or op == "Add"):
                skips.append(Skip(path, name, op, f"excluded by pattern {pat!r}"))
                continue
            if op in SENSITIVE:
                skips.append(Skip(path, name, op, f"kept in floating point: {_sensitive_reason(g, node)} is numerically sensitive"))
                continue
            if op == "Add":
                if residual_add:
                    p = _residual_placement(view, types, path, node, name)
                    if p is not None:
                        placements.append(p)
                continue
            ins = [i for i in node.input[:2] if i]
            if len(ins) < 2:
                continue
            if all(view.constant(i) is not None for i in ins):
                skips.append(Skip(path, name, op, "all inputs are constants (TensorRT folds it)"))
                continue
            nonfloat = [i for i in ins if _not_float(types, i)]
            if nonfloat:
                skips.append(Skip(path, name, op, f"input {nonfloat[0]!r} is not float32"))
                continue
            if op in ("Conv", "ConvTranspose") and view.constant(ins[1]) is None:
                skips.append(Skip(path, name, op, "weight is computed at run time, not a constant (from constants only: `trtconv rewrite` folds it first)"))
                continue
            if op == "MatMul" and any(view.producer_op(i, through=SHAPE_ONLY) in ("Softmax", "LogSoftmax") for i in ins):
                skips.append(Skip(path, name, op, "an input is a softmax output: attention probabilities stay in float"))
                continue
            if op == "Gemm" and view.constant(ins[0]) is not None:
                skips.append(Skip(path, name, op, "constant A input: not a TensorRT INT8 pattern"))
                continue
            tiny = _tiny_gemm(view, op, ins)
            if tiny:
                skips.append(Skip(path, name, op, f"tiny GEMM ({tiny}): INT8 gains nothing, the reformats cost"))
                continue
            for k, t in enumerate(ins):
                w = view.constant(t)  # type and rank only: a weight left on disk stays there
                if w is not None:
                    if w.data_type != TensorProto.FLOAT:
                        break
                    axis = weight_axis(node, k, len(w.dims))
                    why = "weight, per-channel" if axis is not None else "weight, per-tensor"
                    placements.append(Placement(path, name, op, k, t, "weight", why, axis))
                else:
                    placements.append(Placement(path, name, op, k, t, "activation", f"input of {op}"))
    return Plan(tuple(placements), tuple(skips))


MIN_GEMM_DIM = 16  # TensorRT's INT8 GEMM kernels want K and N of at least one 16-wide tile


def _tiny_gemm(view: GraphView, op: str, ins: Sequence[str]) -> str | None:
    """"K×N" when a Gemm/MatMul's constant 2-D weight has K or N below MIN_GEMM_DIM (TensorRT's guidance)."""
    w = view.constant(ins[1]) if op in ("Gemm", "MatMul") else None
    if w is None or len(w.dims) != 2 or min(w.dims) >= MIN_GEMM_DIM:
        return None
    return f"{w.dims[0]}x{w.dims[1]}"


def _residual_placement(
    view: GraphView, types: Mapping[str, int], path: str, node: onnx.NodeProto, name: str
) -> Placement | None:
    if len(node.input) != 2 or any(not i or view.constant(i) is not None for i in node.input):
        return None
    a, b = node.input
    conv_a, conv_b = _conv_like_producer(view, a), _conv_like_producer(view, b)
    if not (conv_a or conv_b):
        return None
    if _not_float(types, a) or _not_float(types, b):
        return None
    if conv_a and conv_b:  # fuse the later conv, quantize the earlier branch (the skip path)
        k = 0 if _position(view, a) <= _position(view, b) else 1
    else:
        k = 1 if conv_a else 0
    return Placement(path, name, "Add", k, node.input[k], "activation",
                     "residual input of Add: lets TensorRT fuse the Add into the Conv")


# ----------------------------------------------------------------------------- insertion


HALF_TINY = np.float16(2.0**-24)  # the smallest positive float16


def half_exact(scale: np.ndarray | float) -> np.ndarray:
    """The smallest positive float16 value >= ``scale``, as float32.

    With the FP16 remainder the scales are stored in float16: rounded down a channel would
    clip, and a scale under 2^-24 (a dead channel's weights) would become 0, which
    TensorRT's parser refuses ("Scale coefficients must all be positive").
    """
    x = np.asarray(scale, dtype=np.float32)
    h = x.astype(np.float16)
    h = np.where(h.astype(np.float32) < x, np.nextafter(h, np.float16(np.inf)), h)
    return np.maximum(h, HALF_TINY).astype(np.float32)


def quantize_weight(w: np.ndarray, axis: int | None, *, half: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric INT8 (range ±127, as TensorRT uses) → (int8 weights, float32 scales).

    ``half``: the scales are made float16-exact first (:func:`half_exact`) and the weights
    quantized with them, so the stored FP16 scale dequantizes exactly what was quantized.
    """
    w = w.astype(np.float32)
    if axis is None:
        amax = np.array(np.abs(w).max(), dtype=np.float32)
    else:
        red = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=red).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    if half:
        scale = half_exact(scale)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def insert_qdq(
    model: onnx.ModelProto, placements: Sequence[Placement], scales: Mapping[str, float], *, half: bool = False
) -> onnx.ModelProto:
    """A copy of ``model`` with the placements applied; activations need a scale in ``scales``.

    ``half``: every scale float16-exact and positive (the model is going to the FP16 remainder).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    view = GraphView(out)  # read for the weights' values only, which insertion leaves alone
    names = model_names(out)
    by_graph: dict[str, list[Placement]] = {}
    for p in placements:
        by_graph.setdefault(p.graph, []).append(p)
    # Bodies before the graphs holding them: a graph's nodes are re-added below (copies), so a body
    # edited after its parent would be edited in a copy the model no longer holds.
    for path, g in reversed(view.graphs):
        todo = by_graph.get(path)
        if not todo:
            continue
        by_node: dict[str, list[Placement]] = {}
        for p in todo:
            by_node.setdefault(p.node, []).append(p)
        made: dict[tuple[str, int | None], str] = {}  # (tensor, axis) -> dequantized name
        new_nodes: list[onnx.NodeProto] = []
        for node in g.node:
            name = node.name or f"{node.op_type}({', '.join(node.output)})"
            for p in by_node.get(name, ()):
                if node.input[p.input_index] != p.tensor:
                    continue
                key = (p.tensor, p.axis if p.kind == "weight" else -1)
                if key not in made:
                    if p.kind == "weight":
                        source = view.constant(p.tensor)
                        made[key] = _add_weight_dq(g, new_nodes, names, p.tensor, view.value(p.tensor), p.axis,
                                                   half=half, on_disk=source is not None and is_lazy(source))
                    else:
                        scale = float(half_exact(scales[p.tensor])) if half else scales[p.tensor]
                        made[key] = _add_activation_qdq(g, new_nodes, names, p.tensor, scale)
                node.input[p.input_index] = made[key]
            new_nodes.append(node)
        g.ClearField("node")
        g.node.extend(new_nodes)
    cleanup(out)  # the float weights now quantized
    return out


def _add_activation_qdq(g: onnx.GraphProto, nodes: list, names: set[str], tensor: str, scale: float) -> str:
    s = fresh_name(f"{tensor}_scale", names)
    z = fresh_name(f"{tensor}_zero_point", names)
    q = fresh_name(f"{tensor}_quantized", names)
    dq = fresh_name(f"{tensor}_dequantized", names)
    g.initializer.append(numpy_helper.from_array(np.array(scale, dtype=np.float32), s))
    g.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int8), z))
    nodes.append(helper.make_node("QuantizeLinear", [tensor, s, z], [q], name=fresh_name(f"{tensor}_QuantizeLinear", names)))
    nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [dq], name=fresh_name(f"{tensor}_DequantizeLinear", names)))
    return dq


def _add_weight_dq(
    g: onnx.GraphProto, nodes: list, names: set[str], tensor: str, w: np.ndarray, axis: int | None, *,
    half: bool = False, on_disk: bool = False,
) -> str:
    """``on_disk``: ``w`` was read from disk, and its INT8 values go back there (load/spill.py)."""
    q, scale = quantize_weight(w, axis, half=half)
    del w
    qn = fresh_name(f"{tensor}_quantized", names)
    s = fresh_name(f"{tensor}_scale", names)
    z = fresh_name(f"{tensor}_zero_point", names)
    dq = fresh_name(f"{tensor}_dequantized", names)
    qt = numpy_helper.from_array(q, qn)
    g.initializer.append(spill_tensor(qt) if on_disk and q.nbytes >= LAZY_TENSOR_MIN else qt)
    g.initializer.append(numpy_helper.from_array(scale, s))
    g.initializer.append(numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8), z))
    node = helper.make_node("DequantizeLinear", [qn, s, z], [dq], name=fresh_name(f"{tensor}_DequantizeLinear", names))
    if axis is not None:
        node.attribute.append(helper.make_attribute("axis", axis))
    nodes.append(node)
    return dq
