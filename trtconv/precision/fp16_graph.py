"""The typed FP32→FP16 rewrite of an ONNX graph, subgraphs included.

Works on the proto, one graph scope at a time, in node order (ONNX graphs are
topologically sorted). Every tensor has a *home* dtype (what its producer writes);
every input of every node has a *wanted* dtype (from the op's schema and the node's
decision). Where they differ a Cast is inserted once, right after the producer, in the
scope that defines the tensor, so If/Loop bodies can read it from the outer scope.
Constants are not cast at run time: a converted copy is stored instead.

Types come from the ONNX schema of each op: inputs bound to the same type variable
get the same dtype, inputs with a fixed type (Resize ``scales``) keep it, and type
variables that appear only among inputs (Shape's input, Resize's ``roi``) accept
whatever arrives. Graph inputs and outputs, and subgraph outputs, keep their types.

Over 400 lines because the typing pass (home and wanted dtypes, cast placement, constant
copies, subgraph scopes) is one algorithm over one state; which nodes stay FP32 and why is
decided in :mod:`trtconv.precision.fp16_rules`.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper

from trtconv.load import graph_dtypes, lazy_as, structure_only
from trtconv.onnxutil import (
    GraphView,
    cleanup,
    constant_tensor,
    fresh_name,
    has_subgraphs,
    is_lazy,
    iter_graphs,
    model_names,
    normalize_domain,
    opset_versions,
    subgraphs,
    tensor_array,
)
from trtconv.precision.fp16_guards import vanishing_guards
from trtconv.precision.fp16_rules import FP16_MAX, NodeView, Rule, const_peak_lookup

FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
FLOATS = (FLOAT, HALF)

# Inputs that carry shapes, sizes, scales, axes or counts: what feeds them is shape computation.
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "ConstantOfShape": (0,),
    "Resize": (1, 2, 3), "Upsample": (1,), "Pad": (1, 3), "Range": (0, 1, 2), "TopK": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "OneHot": (1,), "Split": (1,), "NonMaxSuppression": (2, 3, 4),
    "CenterCropPad": (1,), "Col2Im": (1, 2), "Trilu": (1,), "CumSum": (1,), "ReduceSum": (1,),
    "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,), "ReduceL1": (1,),
    "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
}
SHAPE_SOURCES = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class Decision:
    graph: str
    name: str
    op_type: str
    fp16: bool
    rule: str | None = None
    detail: str | None = None


@dataclass
class RewriteStats:
    casts: int = 0
    constants_converted: int = 0


def inferred_structure(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model``'s structure (no weights: inferring on the whole model would copy every weight three times) with
    ONNX's inferred value infos, subgraphs included; None where inference fails (custom ops, inconsistent
    exports: what the file declares is all there is)."""
    try:
        return onnx.shape_inference.infer_shapes(structure_only(model), check_type=False, strict_mode=False)
    except Exception as exc:
        logging.getLogger(__name__).debug("shape inference failed: %s", exc)
        return None


def graph_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Declared element types plus those of Constant outputs (which carry no value info)."""
    types = graph_dtypes(graph)
    for n in graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    types[n.output[0]] = a.t.data_type
                elif a.name in ("value_float", "value_floats"):
                    types[n.output[0]] = FLOAT
                elif a.name in ("value_int", "value_ints"):
                    types[n.output[0]] = TensorProto.INT64
    return types


def shape_cone(graph: onnx.GraphProto, view: GraphView) -> set[int]:
    """Indices of nodes whose outputs flow (in this graph) into a shape-like input."""
    stack = [n.input[i] for n in graph.node for i in SHAPE_INPUTS.get(n.op_type, ()) if i < len(n.input)]
    cone: set[int] = set()
    while stack:
        site = view.producer(stack.pop())
        if site is None or site.graph is not graph or site.index in cone:
            continue
        cone.add(site.index)
        if site.node.op_type not in SHAPE_SOURCES:
            stack.extend(x for x in site.node.input if x)
    return cone


def _to_dtype(arr: np.ndarray, dtype: int) -> np.ndarray:
    if dtype == HALF:
        with warnings.catch_warnings(), np.errstate(over="ignore"):
            warnings.simplefilter("ignore")
            return np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16)
    return arr.astype(np.float32)


class Rewriter:
    """One conversion run: settings-free; the caller passes the rules and observations."""

    def __init__(
        self,
        model: onnx.ModelProto,
        rules: tuple[Rule, ...],
        *,
        keep_io_types: bool,
        activation_peak: Callable[[str], float | None],
    ) -> None:
        self.model = model
        self.rules = rules
        self.keep_io_types = keep_io_types
        self.activation_peak = activation_peak
        self.opsets = opset_versions(model.opset_import)
        self.opsets.setdefault("", 0)
        self.decisions: list[Decision] = []
        self.stats = RewriteStats()
        self.half_tensors: set[str] = set()  # node outputs written in float16 (for emulate_half)
        self.taken = model_names(model)
        # The model as given: the walk renames and inserts only after it has read a name's producer.
        self.view = GraphView(model)

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def schema(self, node: onnx.NodeProto) -> defs.OpSchema | None:
        domain = normalize_domain(node.domain)
        version = self.opsets.get(domain)
        if version is None:
            return None
        try:
            return defs.get_schema(node.op_type, version, domain)
        except defs.SchemaError:
            return None

    def run(self) -> onnx.ModelProto:
        main = _Scope(self, self.model.graph, None, "main")
        main.process()
        for g in iter_graphs(self.model.graph):
            del g.value_info[:]  # stale: types changed; consumers re-infer
        cleanup(self.model)  # originals that converted copies replaced everywhere
        return self.model


class _Scope:
    def __init__(self, rw: Rewriter, graph: onnx.GraphProto, parent: _Scope | None, path: str) -> None:
        self.rw = rw
        self.graph = graph
        self.parent = parent
        self.path = path
        self.types = graph_types(graph)
        self.home: dict[str, int | None] = {}
        self.alias: dict[str, str] = {}
        self.casts: dict[tuple[str, int], str] = {}
        self.after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
        self.new_inits: list[TensorProto] = []
        self.reserved: dict[str, int] = {}

    # ---------------------------------------------------------------- lookups
    def owner(self, name: str) -> _Scope | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.home:
                return s
            s = s.parent
        return None

    def orig(self, name: str) -> int | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.types:
                return s.types[name]
            s = s.parent
        return None

    def home_of(self, name: str) -> int | None:
        s = self.owner(name)
        return s.home[name] if s else self.orig(name)

    def is_const(self, name: str) -> bool:
        return self.owner(name) is not None and self.rw.view.constant(name, overridable=False) is not None

    def const_value(self, name: str) -> np.ndarray | None:
        return self.rw.view.value(name, overridable=False) if self.owner(name) is not None else None

    # ---------------------------------------------------------------- value plumbing
    def resolve(self, name: str, want: int | None) -> str:
        """The name under which ``name``'s value is available as dtype ``want``."""
        s = self.owner(name)
        if s is None:
            return name
        actual = s.alias.get(name, name)
        home = s.home[name]
        if want is None or home == want or home not in FLOATS or want not in FLOATS:
            return actual
        key = (name, want)
        if key in s.casts:
            return s.casts[key]
        suffix = "_fp16" if want == HALF else "_fp32"
        new = self.rw.fresh(name + suffix)
        const = self.rw.view.constant(name, overridable=False)
        site = self.rw.view.producer(name)
        if const is not None:  # converted copies replace constants; cleanup drops unread originals
            arr = _to_dtype(tensor_array(const), want)  # also a weight left on disk
            if site is None:
                s.new_inits.append(numpy_helper.from_array(arr, new))
            else:
                s.after[site.index].append(helper.make_node(
                    "Constant", [], [new], value=numpy_helper.from_array(arr, new), name=self.rw.fresh(new + "_const")))
            self.rw.stats.constants_converted += 1
        else:
            s.after[-1 if site is None else site.index].append(
                helper.make_node("Cast", [actual], [new], to=want, name=self.rw.fresh(new + "_cast")))
            self.rw.stats.casts += 1
            if want == HALF:
                self.rw.half_tensors.add(new)
        s.casts[key] = new
        return new

    def define(self, name: str, home: int | None) -> None:
        self.home[name] = home

    # ---------------------------------------------------------------- the pass
    def process(self) -> None:
        g = self.graph
        is_main = self.parent is None
        for t in g.initializer:
            self.define(t.name, t.data_type)
        for vi in g.input:  # an initializer that is also an input may be overridden: no constant
            dt = self.types.get(vi.name)
            if is_main and not self.rw.keep_io_types and dt == FLOAT:
                vi.type.tensor_type.elem_type = HALF
                dt = HALF
            self.define(vi.name, dt)
        if is_main:
            for vi in g.output:
                if self.types.get(vi.name) == FLOAT:
                    self.reserved[vi.name] = FLOAT if self.rw.keep_io_types else HALF
        cone = shape_cone(g, self.rw.view)
        # every constant, not only those the walk has defined (a Constant node's is defined when the walk reaches it,
        # and a guard's epsilon is read before: torch.onnx writes LayerNorm's as one)
        guards = vanishing_guards(g, self.rw.view, lambda n: self.rw.view.value(n, overridable=False))
        const_peak = const_peak_lookup(self.const_value)
        for idx, node in enumerate(g.node):
            const = constant_tensor(node)
            if const is not None:
                self.define(node.output[0], const.data_type)
                continue
            self.visit(idx, node, idx in cone, const_peak, guards.get(idx))
        for vi in g.output:
            if is_main:
                want = self.reserved.get(vi.name)
                if want is not None:
                    vi.type.tensor_type.elem_type = want
            else:
                want = self.orig(vi.name)
                vi.name = self.resolve(vi.name, want if want in FLOATS else None)
        self.rebuild()

    def visit(self, idx: int, node: onnx.NodeProto, in_cone: bool, const_peak: Callable[[str], float | None],
              guard: str | None = None) -> None:
        if has_subgraphs(node):
            self.visit_container(idx, node)
            return
        schema = self.rw.schema(node)
        bind_in, bind_out = _bindings(node, schema)
        # outputs whose type inference left blank: derive float32 from the inputs they share a type with
        for k, o in enumerate(node.output):
            if o and self.orig(o) is None and bind_out[k] is not None:
                if any(self.orig(node.input[i]) == FLOAT for i, tv in enumerate(bind_in) if tv == bind_out[k]):
                    self.types[o] = FLOAT
        candidate = any(o and self.orig(o) == FLOAT for o in node.output)
        convert = False
        if candidate:
            view = NodeView(node, self.path, schema, in_cone, const_peak, self.rw.activation_peak, guard)
            rule, detail = _first_rule(self.rw.rules, view)
            convert = rule is None
            self.rw.decisions.append(Decision(self.path, view.label, node.op_type, convert,
                                              rule.id if rule else None, detail))
        tv_dtype = self.type_vars(node, schema, bind_in, bind_out, convert)
        for i, name in enumerate(node.input):
            if not name:
                continue
            tv = bind_in[i]
            want = tv_dtype.get(tv) if tv is not None else None
            if want is None and self.orig(name) == FLOAT:
                want = FLOAT
            node.input[i] = self.resolve(name, want)
        if convert and node.op_type == "Cast":
            _set_attr(node, "to", HALF)
        if convert and node.op_type == "ConstantOfShape":
            _set_constant_of_shape_half(node)
        for k, o in enumerate(node.output):
            if not o:
                continue
            tv = bind_out[k]
            home = tv_dtype.get(tv) if tv is not None and tv_dtype.get(tv) is not None else self.orig(o)
            self.define(o, home)
            if home == HALF:
                self.rw.half_tensors.add(o)
            self.rename_reserved(idx, node, k, home)

    def rename_reserved(self, idx: int, node: onnx.NodeProto, k: int, home: int | None) -> None:
        name = node.output[k]
        want = self.reserved.get(name)
        if want is None or home == want:
            return
        inner = self.rw.fresh(name + ("_fp16" if home == HALF else "_fp32"))
        node.output[k] = inner
        self.alias[name] = inner
        if home == HALF:
            self.rw.half_tensors.discard(name)
            self.rw.half_tensors.add(inner)
        if want == HALF:
            self.rw.half_tensors.add(name)
        self.after[idx].append(helper.make_node("Cast", [inner], [name], to=want, name=self.rw.fresh(name + "_cast")))
        self.rw.stats.casts += 1
        self.casts[(name, want)] = name
        # the value under its public name now has dtype `want`; the home stays with `inner`

    def visit_container(self, idx: int, node: onnx.NodeProto) -> None:
        for i, name in enumerate(node.input):
            if name:
                node.input[i] = self.resolve(name, FLOAT if self.orig(name) == FLOAT else None)
        for attr_label, sub in subgraphs(node):
            prefix = "" if self.parent is None else f"{self.path}/"
            _Scope(self.rw, sub, self, f"{prefix}{node.name or node.op_type}/{attr_label}").process()
        for k, o in enumerate(node.output):
            if o:
                self.define(o, self.orig(o))
                self.rename_reserved(idx, node, k, self.orig(o))

    def type_vars(self, node, schema, bind_in, bind_out, convert) -> dict[str, int | None]:
        if schema is None:
            return {}
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        out: dict[str, int | None] = {}
        for tv in set(x for x in bind_in + bind_out if x is not None):
            names_in = [node.input[i] for i, t in enumerate(bind_in) if t == tv and node.input[i]]
            names_out = [node.output[k] for k, t in enumerate(bind_out) if t == tv and node.output[k]]
            if not any(self.orig(n) == FLOAT for n in names_in + names_out):
                out[tv] = None
                continue
            half_ok = "tensor(float16)" in allowed.get(tv, ())
            if names_out:
                out[tv] = HALF if convert and half_ok else FLOAT
                continue
            homes = {self.home_of(n) for n in names_in if not self.is_const(n)}
            if len(homes) == 1 and (homes != {HALF} or half_ok):
                out[tv] = homes.pop()
            else:
                out[tv] = HALF if convert and half_ok else FLOAT
        return out

    def rebuild(self) -> None:
        """The scope's nodes with the casts and converted constants placed right after their sources."""
        g = self.graph
        nodes = list(self.after.get(-1, []))
        for idx, node in enumerate(g.node):
            nodes.append(node)
            nodes.extend(self.after.get(idx, []))
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend(self.new_inits)


def _bindings(node: onnx.NodeProto, schema: defs.OpSchema | None) -> tuple[list[str | None], list[str | None]]:
    """For each input/output index, the schema type variable it binds (None: fixed type or unknown)."""
    if schema is None:
        return [None] * len(node.input), [None] * len(node.output)
    tvs = {c.type_param_str for c in schema.type_constraints}

    def bind(formals, count):
        out: list[str | None] = []
        for i in range(count):
            if not formals:
                out.append(None)
                continue
            f = formals[min(i, len(formals) - 1)]
            if i >= len(formals) and f.option != defs.OpSchema.FormalParameterOption.Variadic:
                out.append(None)
                continue
            out.append(f.type_str if f.type_str in tvs else None)
        return out

    return bind(list(schema.inputs), len(node.input)), bind(list(schema.outputs), len(node.output))


def _first_rule(rules: tuple[Rule, ...], view: NodeView) -> tuple[Rule | None, str | None]:
    for r in rules:
        detail = r.check(view)
        if detail:
            return r, detail
    return None, None


def _set_attr(node: onnx.NodeProto, name: str, value: int) -> None:
    for a in node.attribute:
        if a.name == name:
            a.i = value
            return
    node.attribute.append(helper.make_attribute(name, value))


def _set_constant_of_shape_half(node: onnx.NodeProto) -> None:
    for a in node.attribute:
        if a.name == "value":
            arr = numpy_helper.to_array(a.t)
            a.t.CopyFrom(numpy_helper.from_array(_to_dtype(arr, HALF), a.t.name))
            return
    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np.float16))))


def emulate_half(model: onnx.ModelProto, half_tensors: set[str]) -> onnx.ModelProto:
    """An FP32 twin of an FP16 model that rounds every float16 tensor through an explicit Cast pair.

    ONNX Runtime's CPU provider has few float16 kernels: it computes the others in float32
    and drops the conversions between neighbouring ones, so an FP16 model run there skips
    most of the rounding (and overflow) that TensorRT will do. Explicit Cast pairs are
    kept, so this twin shows what storing those tensors in FP16 costs. Graph inputs and
    outputs become float32; feed it inputs already rounded to float16.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    taken = model_names(out)

    def fresh(base: str) -> str:
        return fresh_name(base, taken)

    for g in iter_graphs(out.graph):
        for t in g.initializer:
            if t.data_type == HALF and is_lazy(t):  # on disk: converted there, one tensor at a time
                t.CopyFrom(lazy_as(t, FLOAT))
            elif t.data_type == HALF:
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
        for vi in list(g.input) + list(g.output):
            if vi.type.tensor_type.elem_type == HALF:
                vi.type.tensor_type.elem_type = FLOAT
        nodes: list[onnx.NodeProto] = []
        for node in g.node:
            for a in node.attribute:
                if node.op_type == "Cast" and a.name == "to" and a.i == HALF:
                    a.i = FLOAT
                elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == HALF:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
            nodes.append(node)
            for k, o in enumerate(node.output):
                if o in half_tensors and node.op_type != "Constant":
                    raw, r16 = fresh(o + "_raw"), fresh(o + "_r16")
                    node.output[k] = raw
                    nodes.append(helper.make_node("Cast", [raw], [r16], to=HALF, name=fresh("round")))
                    nodes.append(helper.make_node("Cast", [r16], [o], to=FLOAT, name=fresh("round")))
        del g.node[:]
        g.node.extend(nodes)
    return out
