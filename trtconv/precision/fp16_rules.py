"""Why a node stays in FP32: one small rule per reason, each returning its reason or None.

The converter asks every rule, in order, about every float node; the first rule that
answers keeps the node in FP32 and its id and detail go into the report. Adding a
reason means adding one rule here, nothing else.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import defs

from trtconv.onnxutil import display_domain

FP16_MAX = 65504.0

# Ops TensorRT's ONNX parser runs in FP32 only (onnx-tensorrt operator table: no FP16 listed).
TRT_FP32_ONLY = frozenset({"STFT"})
# Ops whose output dtype comes from an attribute, not from their inputs: converting them
# means rewriting that attribute, which trtconv does for Cast and ConstantOfShape only.
DTYPE_FROM_ATTRIBUTE = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "EyeLike",
})


def fp16_label(node: onnx.NodeProto) -> str:
    """How the FP16 report names a node: its name, else its first output, else its op type."""
    return node.name or (node.output[0] if node.output else node.op_type)


@dataclass(frozen=True)
class NodeView:
    """What a rule may look at: the node, its place, its schema and the facts gathered about it."""

    node: onnx.NodeProto
    graph: str  # "main" or the path of the subgraph
    schema: defs.OpSchema | None
    in_shape_computation: bool
    const_peak: Callable[[str], float | None]  # |max| of a constant input, None if not constant
    activation_peak: Callable[[str], float | None]  # |max| on sample data, None if not observed
    guard: str | None = None  # why FP16 would erase an epsilon guard this node is part of (fp16_guards)

    @property
    def label(self) -> str:
        return fp16_label(self.node)


@dataclass(frozen=True)
class Rule:
    """``check`` returns a detail string when the rule keeps the node in FP32."""

    id: str
    summary: str
    check: Callable[[NodeView], str | None]


def excluded_op(op_types: frozenset[str]) -> Rule:
    def check(v: NodeView) -> str | None:
        return f"op type {v.node.op_type} excluded by the user" if v.node.op_type in op_types else None

    return Rule("excluded-op", "op types the user excluded", check)


def excluded_name(patterns: tuple[str, ...]) -> Rule:
    def check(v: NodeView) -> str | None:
        for p in patterns:
            if fnmatch.fnmatchcase(v.label, p):
                return f"node name matches excluded pattern {p!r}"
        return None

    return Rule("excluded-name", "node-name patterns the user excluded", check)


def _present(params: list[defs.OpSchema.FormalParameter], names: list[str]) -> list[defs.OpSchema.FormalParameter]:
    """The formal parameters a node gives a tensor (a variadic last one: if it gives any)."""
    out = []
    for i, p in enumerate(params):
        given = names[i:] if p.option == defs.OpSchema.FormalParameterOption.Variadic else names[i:i + 1]
        if any(given):
            out.append(p)
    return out


def _fp16_allowed(schema: defs.OpSchema, node: onnx.NodeProto) -> str | None:
    """None if every float type variable of the parameters the node uses admits float16, else why not.

    Only those the node uses: LayerNormalization-17's optional Mean and InvStdDev outputs are typed U
    (float or bfloat16, the stash type), but its data, scale and output (T) take float16, and a node
    without those outputs runs in FP16 (TensorRT's parser keeps the statistics in FP32 from
    ``stash_type``). Counting U kept every transformer's LayerNorms in FP32, behind a Cast pair each."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for p in _present(list(schema.inputs), list(node.input)) + _present(list(schema.outputs), list(node.output)):
        ts = p.type_str
        if ts in allowed:
            types = allowed[ts]
            if "tensor(float)" in types and "tensor(float16)" not in types:
                return f"{schema.name}-{schema.since_version} has no float16 variant in ONNX"
            if any(t.startswith(("seq(", "optional(", "map(")) for t in types) and not any(
                t.startswith("tensor(") for t in types
            ):
                return f"{schema.name} works on sequences/optionals, which trtconv does not convert"
    return None


def no_fp16_variant() -> Rule:
    def check(v: NodeView) -> str | None:
        if v.schema is None:
            return f"custom op {display_domain(v.node.domain)}::{v.node.op_type}: its FP16 support is unknown"
        if v.node.op_type in DTYPE_FROM_ATTRIBUTE:
            return f"{v.node.op_type}'s output dtype is set by an attribute"
        return _fp16_allowed(v.schema, v.node)

    return Rule("no-fp16-variant", "ops without an FP16 form in ONNX (or custom ops)", check)


def trt_fp32_only() -> Rule:
    def check(v: NodeView) -> str | None:
        return f"TensorRT runs {v.node.op_type} in FP32 only" if v.node.op_type in TRT_FP32_ONLY else None

    return Rule("trt-fp32-only", "ops TensorRT runs only in FP32", check)


def shape_computation() -> Rule:
    def check(v: NodeView) -> str | None:
        return "computes a shape, size, scale or index" if v.in_shape_computation else None

    return Rule("shape-computation", "float math feeding shapes, scales or indices", check)


def vanishing_epsilon() -> Rule:
    def check(v: NodeView) -> str | None:
        return v.guard

    return Rule("vanishing-epsilon", "an epsilon FP16 rounds to 0, guarding Log/Div/Reciprocal/Pow from zero", check)


def initializer_range(limit: float) -> Rule:
    def check(v: NodeView) -> str | None:
        for name in v.node.input:
            if not name:
                continue
            peak = v.const_peak(name)
            if peak is not None and peak > limit:
                return f"constant {name!r} reaches {peak:.4g} (limit {limit:.4g})"
        return None

    return Rule("initializer-range", "weights or constants beyond the FP16 range", check)


def activation_range(limit: float) -> Rule:
    def check(v: NodeView) -> str | None:
        worst: tuple[float, str] | None = None
        for name in list(v.node.input) + list(v.node.output):
            if not name:
                continue
            peak = v.activation_peak(name)
            if peak is not None and peak > limit and (worst is None or peak > worst[0]):
                worst = (peak, name)
        if worst is None:
            return None
        return f"tensor {worst[1]!r} reaches {worst[0]:.4g} on sample data (limit {limit:.4g})"

    return Rule("activation-range", "activations that get large on sample data", check)


def finite_peak(value: np.ndarray) -> float:
    """The largest finite magnitude in a non-empty float array (0 if none is finite): what the range rules compare.

    Finite: an infinity is one in FP16 too, so an attention mask's ``-inf`` (DETR's ``Where`` fill: four nodes
    kept in FP32 behind Casts for it) changes nothing there; only finite values beyond 65504 do."""
    m = max(float(value.max()), -float(value.min()))  # two reductions, no temporary array
    if not np.isfinite(m):  # NaN/Inf present: the slow way
        a = np.abs(value)
        finite = np.isfinite(a)
        m = float(a[finite].max()) if finite.any() else 0.0
    return m


def const_peak_lookup(get: Callable[[str], np.ndarray | None]) -> Callable[[str], float | None]:
    """:func:`finite_peak` of float constants (``get`` returns a constant's value or None), each computed once."""
    cache: dict[str, float | None] = {}

    def peak(name: str) -> float | None:
        if name not in cache:
            a = get(name)
            cache[name] = None if a is None or a.dtype.kind != "f" or a.size == 0 else finite_peak(a)
        return cache[name]

    return peak
