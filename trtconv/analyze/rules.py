"""Restriction rules: small functions keyed by op type, like onnx-tensorrt's importer table.

Each rule gets a :class:`NodeContext` (the node, its support-table row, the graph index)
and yields :class:`Finding`s. Version differences live in the table's ``params`` column
(e.g. GridSample ``ranks=4`` on 10.16, ``ranks=4|5`` on 11.4), never in the code.
Generic rules (dtype, constant inputs, ranks, unsupported optional I/O, data-dependent
shapes) run for every row that sets the parameter they read.

The table of small rules with its one dispatch; what a rule sees and how it registers are in
:mod:`trtconv.analyze.rule_context`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from onnx import TensorProto

from trtconv.analyze.check_report import BUILDER, ERROR, WARNING, Finding
from trtconv.analyze.rule_context import (
    GENERIC_RULES,
    RULES,
    NodeContext,
    Rule,
    dtype_name,
    generic,
    restriction,
)
from trtconv.analyze.support import OpSupport
from trtconv.onnxutil import subgraphs

_APPLICABLE: dict[int, tuple[Rule, ...]] = {}  # id(row) -> rules for that row; tables live for the process


def _error(rule: str, msg: str, hint: str = "", stage: str = "parser") -> Finding:
    return Finding(rule, ERROR, msg, hint, stage)


def _warn(rule: str, msg: str, hint: str = "", stage: str = "parser") -> Finding:
    return Finding(rule, WARNING, msg, hint, stage)


# ---------------------------------------------------------------- generic rules


# ONNX element types the parser can represent (onnx-tensorrt importerUtils.cpp convertDtype; DOUBLE is
# cast down to FLOAT; FP4 since 10.8). Anything else fails the import of the tensor that has it.
CONVERTIBLE = frozenset({TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16,
                         TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.INT32, TensorProto.INT64,
                         TensorProto.FLOAT8E4M3FN, TensorProto.INT4, TensorProto.FLOAT4E2M1})
# Quantized types: a tensor of one must come from / go to a Quantize/Dequantize layer (the builder checks).
QUANTIZED = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.INT4, TensorProto.FLOAT4E2M1})
NO_INPUT_DTYPE_RULE = frozenset({"Cast", "CastLike"})  # cast_target checks both ends


@generic("types")
def input_dtype(ctx: NodeContext) -> Iterator[Finding]:
    """The first (data) input's dtype must be one the table lists for the op."""
    name = ctx.input(0)
    codes = ctx.row.type_codes()
    if not name or not codes or ctx.node.op_type in NO_INPUT_DTYPE_RULE:
        return
    dt = ctx.index.dtypes.get(name)
    if dt is None or dt in codes:
        return
    if dt == TensorProto.DOUBLE and (ctx.index.is_constant(name) or TensorProto.FLOAT in codes):
        yield _warn("dtype", f"{ctx.input_label(0)} is DOUBLE; TensorRT casts it down to FLOAT (values clamped "
                             "to the FLOAT range)")
        return
    yield _error("dtype", f"{ctx.input_label(0)} has dtype {dtype_name(dt)}; TensorRT {ctx.node.op_type} "
                          f"accepts {', '.join(ctx.row.types)}")


@generic("const_inputs")
def constant_inputs(ctx: NodeContext) -> Iterator[Finding]:
    """Inputs the parser needs at build time (axes, K, depth, ...) must be initializers or Constants."""
    for idx in ctx.row.param("const_inputs"):
        i = int(idx)
        name = ctx.input(i)
        if name and not ctx.index.is_constant(name):
            yield _error("constant-input", f"{ctx.input_label(i)} must be an initializer or Constant for "
                                           f"TensorRT, but {name!r} is computed at run time",
                         "fold constants (polygraphy surgeon sanitize --fold-constants) or export with fixed values")


@generic("ranks")
def input_rank(ctx: NodeContext) -> Iterator[Finding]:
    ranks = ctx.row.param("ranks")
    r = ctx.index.rank(ctx.input(0)) if ranks and ctx.input(0) else None
    if r is not None and str(r) not in ranks:
        yield _error("rank", f"{ctx.input_label(0)} has rank {r}; TensorRT {ctx.node.op_type} supports rank "
                             f"{' or '.join(ranks)}")


@generic("unsupported_")
def unsupported_io(ctx: NodeContext) -> Iterator[Finding]:
    for idx in ctx.row.param("unsupported_inputs"):
        if ctx.input(int(idx)):
            yield _error("unsupported-input", f"{ctx.input_label(int(idx))} is not supported by TensorRT")
    for idx in ctx.row.param("unsupported_outputs"):
        if ctx.output(int(idx)):
            yield _error("unsupported-output", f"{ctx.output_label(int(idx))} is not supported by TensorRT")


@generic("data_dependent")
def data_dependent(ctx: NodeContext) -> Iterator[Finding]:
    if ctx.row.param("data_dependent"):
        yield _warn("data-dependent-shape", f"{ctx.node.op_type} has a data-dependent output shape: TensorRT "
                                            "parses it, but outputs that depend on it need an output allocator "
                                            "at run time and cannot be profiled ahead")


@generic("no_rtx_kernel")
def no_rtx_kernel(ctx: NodeContext) -> Iterator[Finding]:
    """Ops TensorRT-RTX parses but cannot build ahead of time (measured: no kernel / no runner)."""
    yield _error("no-rtx-kernel", f"{ctx.node.op_type}: TensorRT-RTX parses it, but its ahead-of-time build has no "
                                  "kernel for it (measured)", "build for TensorRT 10/11, or replace the op with "
                                                              "standard ONNX operators", BUILDER)


@generic("plugin")
def nvinfer_plugin(ctx: NodeContext) -> Iterator[Finding]:
    """Ops the parser imports as a libnvinfer_plugin plugin: that library must be loaded."""
    for name in ctx.row.param("plugin"):
        yield _warn("needs-nvinfer-plugin", f"imported as the {name} plugin of libnvinfer_plugin",
                    "libnvinfer_plugin must be loaded at build and run time (trtconv build does it)")


# ---------------------------------------------------------------- op-specific rules


@restriction("TopK")
def topk(ctx: NodeContext) -> Iterator[Finding]:
    limit = int((ctx.row.param("max_k") or ("3840",))[0])
    if int(ctx.attr("sorted", 1)) != 1:
        yield _error("topk-sorted", "TensorRT TopK requires sorted=1")
    if ctx.opset < 10:
        k: int | None = int(ctx.attr("k", 0))
    else:
        value = ctx.index.constant_value(ctx.input(1))
        k = int(value.reshape(-1)[0]) if value is not None and value.size else None
        if value is None:
            yield _warn("topk-k", f"K is computed at run time; TensorRT requires K < {limit}, which cannot be "
                                  "checked before the build")
    if k is not None and k >= limit:
        yield _error("topk-k", f"K = {k}, but TensorRT TopK requires K < {limit}")


def _allowed(ctx: NodeContext, rule: str, attr: str, default: str) -> Iterator[Finding]:
    allowed = ctx.row.param(attr)
    value = ctx.attr(attr, default)
    if allowed and value not in allowed:
        yield _error(rule, f"{attr}={value!r} is not supported by TensorRT (supported: {', '.join(allowed)})")


@restriction("Resize")
def resize(ctx: NodeContext) -> Iterator[Finding]:
    yield from _allowed(ctx, "resize-coordinate-mode", "coordinate_transformation_mode", "half_pixel")
    yield from _allowed(ctx, "resize-mode", "mode", "nearest")
    if ctx.attr("mode", "nearest") == "nearest":
        yield from _allowed(ctx, "resize-nearest-mode", "nearest_mode", "round_prefer_floor")
    yield from _allowed(ctx, "resize-aspect-ratio", "keep_aspect_ratio_policy", "stretch")
    if int(ctx.attr("antialias", 0)) != 0:
        yield _error("resize-antialias", "antialias=1 is not supported by TensorRT Resize")
    axes = ctx.attr("axes")
    scales = ctx.input(2)
    if axes is not None and scales and not ctx.index.is_constant(scales):
        rank = ctx.index.rank(ctx.input(0))
        want = list(range(rank)) if rank is not None else sorted(axes)
        if list(axes) != want or (rank is not None and len(axes) != rank):
            yield _error("resize-axes", f"axes={list(axes)} with run-time scales: TensorRT needs axes to be "
                                        "0..rank-1 in order")


@restriction("DeformConv")
def deform_conv(ctx: NodeContext) -> Iterator[Finding]:
    pads = list(ctx.attr("pads", []) or [])
    half = len(pads) // 2
    if pads and pads[:half] != pads[half:]:
        yield _error("deformconv-pads", f"pads={pads} are asymmetric; TensorRT DeformConv needs equal begin and "
                                        "end pads on each axis")


@restriction("LSTM", "GRU", "RNN")
def recurrent(ctx: NodeContext) -> Iterator[Finding]:
    layouts = ctx.row.param("layout") or ("0",)
    if str(int(ctx.attr("layout", 0))) not in layouts:
        yield _error("rnn-layout", f"{ctx.node.op_type} layout={int(ctx.attr('layout', 0))} is not supported by "
                                   f"TensorRT (layout must be {' or '.join(layouts)})")
    if ctx.node.op_type == "LSTM" and int(ctx.attr("input_forget", 0)) != 0:
        yield _error("lstm-input-forget", "LSTM input_forget=1 is not supported by TensorRT")
    acts = [a.decode() if isinstance(a, bytes) else a for a in (ctx.attr("activations") or [])]
    if ctx.attr("direction", "forward") == "bidirectional" and acts and acts[: len(acts) // 2] != acts[len(acts) // 2:]:
        yield _error("rnn-activations", f"bidirectional {ctx.node.op_type} with different forward/reverse "
                                        f"activations {acts} is not supported by TensorRT")
    state = [i for i in (1, 2) if ctx.output(i) and ctx.output(i) in ctx.index.consumed]
    severity = ctx.row.param("state_in_if")
    if severity and state and ctx.index.in_runtime_branch(ctx.path):
        make = _error if severity[0] == "error" else _warn
        yield make("rnn-in-if", f"{ctx.node.op_type} inside an If branch with its final-state "
                                f"{ctx.output_label(state[0])} used: the parser accepts it, the TensorRT-RTX builder "
                                "fails (graphScope assertion)",
                   "take the If out: export one graph per branch (e.g. one per sample rate), or fold the "
                   "condition to a constant so the parser imports only the branch taken", BUILDER)


@restriction("ScatterND")
def scatter_nd(ctx: NodeContext) -> Iterator[Finding]:
    yield from _allowed(ctx, "scatternd-reduction", "reduction", "none")


@restriction("MaxPool", "AveragePool", "LpPool")
def pool_dilations(ctx: NodeContext) -> Iterator[Finding]:
    dil = list(ctx.attr("dilations", []) or [])
    if any(d != 1 for d in dil):
        yield _error("pool-dilations", f"dilations={dil}: TensorRT {ctx.node.op_type} needs them empty or all ones")


@restriction("QuantizeLinear", "DequantizeLinear")
def zero_point(ctx: NodeContext) -> Iterator[Finding]:
    name = ctx.input(2)
    if not name:
        return
    value = ctx.index.constant_value(name)
    if ctx.index.dtypes.get(name) == TensorProto.FLOAT8E4M3FN:
        return  # an FP8 zero point is ignored (measured: parses and builds)
    if not ctx.index.is_constant(name):
        yield _error("zero-point", f"{ctx.input_label(2)} is computed at run time: the parser accepts it, the "
                                   "builder needs a constant zero", "make the zero point an initializer", BUILDER)
    elif value is not None and value.size and bool((value.astype("float64") != 0).any()):
        yield _error("zero-point", f"{ctx.input_label(2)} is non-zero; TensorRT supports symmetric quantization only")


@restriction("Dropout")
def dropout(ctx: NodeContext) -> Iterator[Finding]:
    value = ctx.index.constant_value(ctx.input(2)) if ctx.input(2) else None
    if value is not None and value.size and bool(value.reshape(-1)[0]):
        yield _error("dropout-training", "training_mode is True; TensorRT needs it to be False")


@restriction("Constant")
def constant(ctx: NodeContext) -> Iterator[Finding]:
    for name in ("sparse_value", "value_string", "value_strings"):
        if ctx.has_attr(name):
            yield _error("constant-attr", f"Constant with {name} is not supported by TensorRT")


@restriction("Cast", "CastLike")
def cast_target(ctx: NodeContext) -> Iterator[Finding]:
    """Both ends of a cast: a type the parser cannot represent fails the parse; FP8/INT4/FP4
    parse, but the builder wants them produced/consumed by a quantize layer, not a cast."""
    to = ctx.attr("to") if ctx.node.op_type == "Cast" else ctx.index.dtypes.get(ctx.input(1))
    ends = (("cast to", int(to) if to is not None else None), ("cast from", ctx.index.dtypes.get(ctx.input(0))))
    for what, dt in ends:
        if dt is None or dt == TensorProto.UNDEFINED:
            continue
        if dt not in CONVERTIBLE:
            yield _error("dtype", f"{what} {dtype_name(dt)}: TensorRT has no such type")
        elif dt in QUANTIZED:
            yield _error("dtype", f"{what} {dtype_name(dt)}: the parser accepts it, but the builder needs "
                                  f"{dtype_name(dt)} tensors to come from / go to a Quantize/Dequantize layer",
                         "use QuantizeLinear/DequantizeLinear instead of Cast for quantized types", BUILDER)
        elif dt == TensorProto.DOUBLE:
            yield _warn("dtype", f"{what} DOUBLE: TensorRT computes it in FLOAT")


@restriction("If")
def if_branches(ctx: NodeContext) -> Iterator[Finding]:
    branches = dict(subgraphs(ctx.node))
    then_g, else_g = branches.get("then_branch"), branches.get("else_branch")
    if then_g is None or else_g is None or ctx.index.is_constant(ctx.input(0)):
        return  # a constant condition: the parser imports only the branch taken
    by_value = ctx.index.depends_on_values(ctx.input(0))
    if by_value:
        hint = ("the condition depends on an input's value, so static shapes cannot fold it: make both branches "
                "return the same rank (e.g. Reshape instead of a conditional Squeeze)")
    else:
        hint = ("the condition depends only on shapes: with static input shapes it folds to a constant and the "
                "parser imports one branch (give --shapes, then fold constants with `trtconv rewrite`)")
    for a, b in zip(then_g.output, else_g.output):
        ra, rb = ctx.index.rank(a.name), ctx.index.rank(b.name)
        if ra is not None and rb is not None and ra != rb:
            msg = f"branch outputs {a.name!r} (rank {ra}) and {b.name!r} (rank {rb}) differ in rank"
            if by_value:
                yield _error("if-branch-rank", msg + "; the parser accepts it, the builder needs equal ranks", hint,
                             BUILDER)
            else:  # measured: the builder folds a shape-only condition once the profile fixes the shapes
                yield _warn("if-branch-rank", msg + ": builds only where the optimization profile fixes the shapes "
                                                    "the condition reads (min = max)", hint, BUILDER)
        if a.name == b.name:
            yield _error("if-branch-names", f"both branches name their output {a.name!r}; TensorRT needs "
                                            "different names")


@restriction("TensorScatter")
def tensor_scatter(ctx: NodeContext) -> Iterator[Finding]:
    if int(ctx.attr("axis", -2)) != -2:
        yield _error("tensorscatter-axis", "TensorRT TensorScatter requires axis=-2")
    yield from _allowed(ctx, "tensorscatter-mode", "mode", "linear")


@restriction("Mod")
def mod_fmod(ctx: NodeContext) -> Iterator[Finding]:
    allowed = ctx.row.param("fmod0_types")
    dt = ctx.index.dtypes.get(ctx.input(0))
    if allowed and int(ctx.attr("fmod", 0)) == 0 and dt in (TensorProto.FLOAT, TensorProto.FLOAT16,
                                                             TensorProto.BFLOAT16, TensorProto.DOUBLE):
        yield _error("mod-fmod", f"fmod=0 with {dtype_name(dt)} inputs: TensorRT Mod supports fmod=0 only for "
                                 f"{' and '.join(allowed)} (set fmod=1 for floats)")


@restriction("LpPool")
def lp_pool(ctx: NodeContext) -> Iterator[Finding]:
    allowed = ctx.row.param("p")
    p = int(ctx.attr("p", 2))
    if allowed and str(p) not in allowed:
        yield _error("lppool-p", f"p={p}: TensorRT LpPool supports only p = {' or '.join(allowed)}")


@restriction("BatchNormalization")
def batchnorm_training(ctx: NodeContext) -> Iterator[Finding]:
    if ctx.row.param("training_mode") and int(ctx.attr("training_mode", 0)) != 0:
        yield _error("batchnorm-training", "training_mode=1 is not supported by TensorRT BatchNormalization",
                     "export the model in eval mode")


@restriction("Range")
def range_inputs(ctx: NodeContext) -> Iterator[Finding]:
    if not ctx.row.param("float_const"):
        return
    for i in range(3):
        name = ctx.input(i)
        if name and ctx.index.dtypes.get(name) == TensorProto.FLOAT and ctx.index.is_graph_input(name):
            yield _error("range-float-input", f"{ctx.input_label(i)} is a FLOAT network input: TensorRT needs "
                                              "Range's inputs as INT32/INT64 shape tensors or constants",
                         "make start/limit/delta integers or constants")
            return


@restriction("Resize", "Upsample")
def runtime_scales(ctx: NodeContext) -> Iterator[Finding]:
    for idx in ctx.row.param("scales_not_input"):
        name = ctx.input(int(idx))
        if name and ctx.index.dtypes.get(name) == TensorProto.FLOAT and ctx.index.is_graph_input(name):
            yield _error("resize-runtime-scales", f"{ctx.input_label(int(idx))} is a FLOAT network input: TensorRT "
                                                  "treats it as a shape tensor, which must be INT32/INT64",
                         "make the scales an initializer, or pass output sizes instead")


@restriction("MatMul")
def matmul_vector(ctx: NodeContext) -> Iterator[Finding]:
    limit = ctx.row.param("vector_matrix_max_rank")
    ra, rb = ctx.index.rank(ctx.input(0)), ctx.index.rank(ctx.input(1))
    if limit and ra == 1 and rb is not None and rb > int(limit[0]):
        yield _error("matmul-vector-rank", f"a 1-D first input with a rank-{rb} second input fails in the "
                                           "TensorRT importer", "unsqueeze the vector to rank 2 first")


@restriction("DequantizeLinear")
def dequantize_4bit(ctx: NodeContext) -> Iterator[Finding]:
    if not ctx.row.param("even_4bit") or ctx.index.dtypes.get(ctx.input(0)) not in (TensorProto.INT4,
                                                                                       TensorProto.FLOAT4E2M1):
        return
    dims = ctx.index.dims(ctx.input(0))
    if dims and all(isinstance(d, int) for d in dims) and int(np.prod(dims)) % 2:
        yield _error("dequantize-4bit-odd", f"{ctx.input_label(0)} has {int(np.prod(dims))} elements: TensorRT "
                                            "4-bit quantization needs an even number")


@restriction("QuantizeLinear")
def quantize_output_dtype(ctx: NodeContext) -> Iterator[Finding]:
    dt = ctx.attr("output_dtype")
    if dt and int(dt) not in CONVERTIBLE | {TensorProto.UINT8}:
        yield _error("dtype", f"output_dtype {dtype_name(int(dt))} is not a type TensorRT can quantize to")
    elif dt and int(dt) in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE):
        yield _error("dtype", f"output_dtype {dtype_name(int(dt))} is not a quantized type")


@restriction("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike")
def random_dtype(ctx: NodeContext) -> Iterator[Finding]:
    allowed = ctx.row.param("dtype_attr")
    dt = ctx.attr("dtype")
    if allowed and dt is not None and int(dt) not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        yield _error("random-dtype", f"dtype={dtype_name(int(dt))}: TensorRT {ctx.node.op_type} makes only "
                                     f"{' or '.join(allowed)}")


@restriction("Attention")
def attention(ctx: NodeContext) -> Iterator[Finding]:
    for name in ctx.row.param("no_attrs"):
        if ctx.has_attr(name) and ctx.attr(name) not in (0, 0.0):
            yield _error("attention-attr", f"Attention with {name}={ctx.attr(name)} is not supported by TensorRT")
    if ctx.row.param("mask_causal") and int(ctx.attr("is_causal", 0)) and ctx.input(3):
        yield _error("attention-mask-causal", "Attention with both attn_mask and is_causal=1 is not supported by "
                                              "TensorRT")
    if ctx.row.param("kv_head_size"):
        k, v = ctx.index.dims(ctx.input(1)), ctx.index.dims(ctx.input(2))
        if k and v and len(k) == len(v) and isinstance(k[-1], int) and isinstance(v[-1], int) and k[-1] != v[-1]:
            yield _error("attention-kv-size", f"key head size {k[-1]} differs from value head size {v[-1]}: "
                                              "TensorRT needs them equal")


@restriction("ModulatedDeformConv2d")
def mdcn_plugin_version(ctx: NodeContext) -> Iterator[Finding]:
    if ctx.attr("plugin_version", "1") != "2":
        yield _warn("plugin-version", "no plugin_version=\"2\": the parser binds the deprecated version-1 plugin")


def _applicable(row: OpSupport) -> tuple[Rule, ...]:
    rules = _APPLICABLE.get(id(row))
    if rules is None:
        def wanted(param: str) -> bool:
            if param == "types":
                return bool(row.codes)
            return any(k.startswith(param) for k in row.params)

        rules = tuple(fn for param, fn in GENERIC_RULES if wanted(param)) + tuple(RULES.get(row.op_type, ()))
        _APPLICABLE[id(row)] = rules
    return rules


def run_rules(ctx: NodeContext) -> list[Finding]:
    findings: list[Finding] = []
    for rule in _applicable(ctx.row):
        findings.extend(rule(ctx))
    return findings
