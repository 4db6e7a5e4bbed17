"""Numeric proofs: every rewrite is checked when it is made, not only in our tests.

Two kinds:

* **node proofs**: the replacement nodes alone, on the inputs the rule chose (random data of
  the node's channel counts with its real weights), against what the rule's reference
  implementation of the *original* op computes on them (:class:`NodeProofCase`).
  Standard-op replacements run in ONNX Runtime; plugin nodes (no CPU implementation exists)
  run in onnx's reference evaluator with the plugin's contract implemented by the rule, so
  a wrong field, order or pad split still fails.
* **graph proof**: the model before and after in ONNX Runtime on the same random inputs, run
  where the change can reach (:mod:`.change_scope`, :mod:`.scoped_proof`): the part both graphs
  share runs once, on the original, and each side's changed region runs on its values; outputs
  the change cannot reach are the same by construction. Where the region cannot be isolated,
  both whole graphs run (``scope`` in the record says which, why, and how many nodes ran). Where
  a node cannot run in ONNX Runtime (a custom op, a plugin node), the graph is cut there in both
  models: its output becomes an input fed the same random data, so everything else (clean-ups,
  opset conversion) is still compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from trtconv.errors import InvalidModelError, OutOfMemoryError, TrtconvError, UsageError
from trtconv.load import PROTOBUF_LIMIT, approx_size, override_input_shapes, structure_only
from trtconv.onnxutil import ORT_DOMAINS, is_default_domain, is_sorted, iter_graphs, normalize_domain
from trtconv.reference import OutputStats, compare_arrays, random_feeds, run, session
from trtconv.rewrites.change_scope import Scope, change_scope
from trtconv.rewrites.emitter import PENDING_DOMAIN
from trtconv.rewrites.rewrite_settings import GRAPH_RTOL, NODE_RTOL
from trtconv.rewrites.roundtrip import sorted_copy
from trtconv.rewrites.scoped_proof import Unscoped, run_scoped

ONNXRUNTIME = "onnxruntime"
REFERENCE_EVALUATOR = "reference-evaluator"
MS_DOMAIN = "com.microsoft"
# The tolerances, one per arithmetic: max |err| <= rtol * max(1, max |reference|). Each is a
# number of units in the last place (machine epsilon) of its type, so loosening one is a visible
# change (tests/rewrites/test_proof_tolerance.py pins them against np.finfo):
# float32: NODE_RTOL (1e-5, 84 eps: a replacement reorders sums over a few hundred terms) and
# GRAPH_RTOL (1e-6, 8.4 eps: a clean-up changes no arithmetic) in rewrite_settings.py;
FP16_RTOL = 1e-2  # FP16 keeps about three decimal digits: 10.24 eps of float16 (2**-10)
BF16_RTOL = 6e-2  # bfloat16 keeps about two: 7.68 eps of bfloat16 (2**-7)
# quantized replacements: a bound derived from the quantization step (bound_rtol), plus the float32
# node tolerance; QUANT_SLACK widens a half-step bound by the float32 rounding of the step itself
QUANT_SLACK = 1e-3
# A graph that computes in a half type is proven at that type's tolerance: a rewrite that folds
# constants, or only moves a node, changes where ONNX Runtime rounds to FP16 (an FP16 ulp at 2..4
# is 0.00195), which FP32's 1e-6 would call a changed model.
HALF_RTOL = {"float16": FP16_RTOL, "bfloat16": BF16_RTOL}
_HALF_TYPES = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}


@dataclass(frozen=True)
class Proof:
    method: str  # "onnxruntime" | "reference-evaluator" | "none"
    passed: bool
    tolerance: float | None = None
    stats: tuple[OutputStats, ...] = ()
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reason: str = ""
    arithmetic: str = "float32"  # the narrowest float type the proven graph computes in: it sets the tolerance
    scope: Mapping[str, Any] = field(default_factory=dict)  # graph proofs: how much ran, and why whole if it was

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "passed": self.passed,
            "tolerance": self.tolerance,
            "outputs": [s.to_json() for s in self.stats],
            "shapes": {k: list(v) for k, v in sorted(self.shapes.items())},
            "reason": self.reason,
            "arithmetic": self.arithmetic,
            "scope": dict(self.scope) or None,
        }

    @property
    def max_abs(self) -> float | None:
        return max((s.max_abs for s in self.stats), default=None)


class OriginalDidNotRun(Exception):
    """The proof's prologue failed: ONNX Runtime could not run the original op, so there is nothing to
    prove the replacement against. Raised by :func:`run_original`; the driver records :attr:`proof`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def proof(self) -> Proof:
        return Proof("none", False, reason=self.reason)


def run_original(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """Every proof's prologue, written once: the original op (or pattern) in ONNX Runtime, the one
    implementation of ONNX Runtime's own ops. Raises :class:`OriginalDidNotRun` when it cannot run
    (the rule's proof is then "none", failed); running out of memory is not a proof's verdict and
    propagates."""
    try:
        return run(session(model), dict(feeds), list(outputs))
    except OutOfMemoryError:
        raise
    except Exception as exc:  # a load or run failure of the original: the proof cannot run
        text = exc.message if isinstance(exc, TrtconvError) else str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise OriginalDidNotRun(f"the original did not run in ONNX Runtime: {first[:200]}") from exc


@dataclass(frozen=True)
class Original:
    """The original pattern as ONNX, taken before the rewrite rewires its nodes: what the proof runs."""

    nodes: tuple[onnx.NodeProto, ...]
    constants: Mapping[str, np.ndarray]

    @staticmethod
    def of(nodes: Sequence[gs.Node]) -> Original:
        consts = {t.name: np.asarray(t.values) for n in nodes for t in n.inputs if isinstance(t, gs.Constant)}
        return Original(tuple(OnnxExporter.export_node(n) for n in nodes), consts)

    def run(self, inputs: Mapping[str, np.ndarray], output: str, opset: int,
            output_type: int = onnx.TensorProto.FLOAT) -> np.ndarray:
        """The pattern's output in ONNX Runtime (:func:`run_original`: raises OriginalDidNotRun)."""
        model = original_model(self, inputs, output, opset, output_type)
        return run_original(model, inputs, [output])[output]


def original_model(original: Original, inputs: Mapping[str, np.ndarray], output: str, opset: int,
                   output_type: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    protos, consts = original.nodes, original.constants
    g = helper.make_graph(
        protos, "original",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(output, output_type, None)],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in sorted(consts.items())],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS_DOMAIN, 1)],
                             ir_version=9)


def bound_rtol(bound: float, reference: np.ndarray, floor: float) -> float:
    """A quantized replacement's tolerance: its absolute ``bound`` (derived from the quantization
    step) relative to the reference's scale, plus ``floor`` (the float32 node tolerance) for the
    float arithmetic around it."""
    return bound / max(1.0, float(np.abs(reference).max()) if reference.size else 1.0) + floor


def half_step(step: float) -> float:
    """What rounding to a quantization grid of ``step`` may move a value: half a step, widened by
    QUANT_SLACK for the float32 rounding of the step itself."""
    return step / 2 * (1 + QUANT_SLACK)


@dataclass(frozen=True)
class NodeProofCase:
    """What a rule hands the node proof: its replacement, the inputs to run it on, and what
    the original op computes on them (the rule's reference implementation)."""

    replacement: Sequence[gs.Node]
    output: str
    values: Mapping[str, np.ndarray]  # tensor name -> value for what the replacement reads from outside
    expected: np.ndarray  # the original op's output on ``values``
    dtype: np.dtype  # the output's dtype; float16 is checked at max(rtol, FP16_RTOL)
    opset: int  # default-domain opset of the proof model
    runner: str = ONNXRUNTIME  # or REFERENCE_EVALUATOR, with ``custom_ops`` for plugin nodes
    custom_ops: tuple[type[OpRun], ...] = ()
    rtol: float = NODE_RTOL
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # reported, by role


def _export_nodes(nodes: Sequence[gs.Node]) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], list[str]]:
    """Node protos, constant inputs, and the names of the variables they read from outside."""
    protos: list[onnx.NodeProto] = []
    consts: dict[str, np.ndarray] = {}
    produced: set[str] = set()
    external: list[str] = []
    for n in nodes:
        protos.append(OnnxExporter.export_node(n))
        for t in n.inputs:
            if isinstance(t, gs.Constant):
                consts[t.name] = np.asarray(t.values)
            elif t.name and t.name not in produced and t.name not in external:
                external.append(t.name)
        produced.update(o.name for o in n.outputs)
    for p in protos:
        if p.domain == PENDING_DOMAIN:
            p.domain = ""
    return protos, consts, external


def prove_node(case: NodeProofCase) -> Proof:
    """Run the replacement on the case's inputs and compare with the original's expected output."""
    rtol = max(case.rtol, FP16_RTOL) if case.dtype == np.float16 else case.rtol
    protos, consts, external = _export_nodes(case.replacement)
    feeds = {n: case.values[n] for n in external if n not in consts}
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in sorted(consts.items())]
    g = helper.make_graph(
        protos, "proof",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(case.output, helper.np_dtype_to_tensor_dtype(case.dtype), None)],
        initializer=inits,
    )
    domains = sorted({normalize_domain(p.domain) for p in protos} - {""})
    opsets = [helper.make_opsetid("", case.opset)] + [helper.make_opsetid(d, 1) for d in domains]
    mini = helper.make_model(g, opset_imports=opsets, ir_version=9)
    ref = case.expected
    try:
        if case.runner == ONNXRUNTIME:
            got = run(session(mini), feeds, [case.output])[case.output]
        else:
            evaluated = ReferenceEvaluator(mini, new_ops=list(case.custom_ops)).run([case.output], feeds)
            got = np.asarray(evaluated[0])  # type: ignore[index]
        if got.shape != ref.shape:
            raise ValueError(f"output shape {got.shape} differs from the original's {ref.shape}")
    except Exception as exc:  # a replacement that cannot even run is a failed proof, not a crash
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Proof(case.runner, False, None, (), case.shapes, f"replacement failed to run: {first[:300]}")
    stats = compare_arrays(case.output, ref, got)
    tol = rtol * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    passed = stats.nonfinite == 0 and stats.max_abs <= tol
    return Proof(case.runner, passed, tol, (stats,), case.shapes)


# ---------------------------------------------------------------------------- graph proof


def _runnable(node: onnx.NodeProto) -> bool:
    if normalize_domain(node.domain) not in ORT_DOMAINS:
        return False
    if is_default_domain(node.domain):
        return bool(onnx.defs.has(node.op_type))
    return True


def unrunnable_outputs(model: onnx.ModelProto) -> set[str]:
    return {o for n in model.graph.node if not _runnable(n) for o in n.output if o}


def _cut(model: onnx.ModelProto, cut: set[str], shapes: Mapping[str, tuple[list[Any], int]]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [n for n in out.graph.node if not (set(n.output) & cut)]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    produced = {o for n in keep for o in n.output}
    have = {i.name for i in out.graph.input}
    for name in sorted(cut):
        if name in produced or name in have:
            continue
        dims, elem = shapes[name]
        out.graph.input.append(helper.make_tensor_value_info(name, elem, dims))
    return out


def _known_shapes(model: onnx.ModelProto) -> dict[str, tuple[list[Any], int]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(structure_only(model), data_prop=True)
    except Exception:
        inferred = model
    out: dict[str, tuple[list[Any], int]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.elem_type:
            continue
        dims = [int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim]
        if all(isinstance(d, int) for d in dims):
            out[vi.name] = (dims, tt.elem_type)
    return out


def prove_graph(
    before: onnx.ModelProto,
    after: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]],
    extra_cuts: set[str],
    seed: int,
    rtol: float = GRAPH_RTOL,
    kept: Mapping[str, onnx.TensorProto] | None = None,
    lengths: Mapping[str, str] | None = None,
) -> Proof:
    """Both models in ONNX Runtime on the same random inputs (cut where ORT cannot run a node), run
    where the change can reach; ``kept``: the rewritten model's constants exported untouched from
    the original's tensors (name -> that tensor), the same without a look at their bytes;
    ``lengths``: the inputs that are sequence lengths, read off the model before ``--shapes`` fixed
    its dims (:func:`~trtconv.reference.ort.random_feeds`). ``before`` need not be sorted.

    When no numbers can be compared (dynamic inputs without --shapes, inputs random data
    cannot drive), the rewritten model must at least still load wherever the original did.
    """
    kind = arithmetic(before)
    proof = _compare_graphs(before, after, shapes, extra_cuts, seed, max(rtol, HALF_RTOL.get(kind, 0.0)),
                            kept if kept is not None else {}, lengths)
    proof = replace(proof, arithmetic=kind)
    if proof.method == "none" and proof.passed and approx_size(before) <= PROTOBUF_LIMIT:
        problem = _load_problem(before, after)
        if problem:
            return Proof("onnxruntime", False, reason=f"the rewritten model does not load in ONNX Runtime: {problem}")
    return proof


def arithmetic(model: onnx.ModelProto) -> str:
    """"bfloat16" or "float16" when the graph computes in that type (a constant, a Cast or a declared
    tensor of it), else "float32". Only dims and types are read, never weight bytes."""
    found: set[int] = set()
    for g in iter_graphs(model.graph):
        found.update(t.data_type for t in g.initializer)
        for vi in (*g.input, *g.value_info, *g.output):
            found.add(vi.type.tensor_type.elem_type)
        for n in g.node:
            for a in n.attribute:
                if (n.op_type == "Cast" and a.name == "to") or (n.op_type == "CastLike" and a.name == "to"):
                    found.add(a.i)
                elif a.HasField("t"):
                    found.add(a.t.data_type)
    for dtype in (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16):
        if dtype in found:
            return _HALF_TYPES[dtype]
    return "float32"


def measure_drift(before: onnx.ModelProto, after: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                  seed: int) -> Proof:
    """How far the whole model moved where a rule changed the numbers on purpose (dynamic
    quantization dropped): both models end to end, uncut, on the same random inputs. A figure
    to report, not a pass/fail (the node proofs hold each replacement to its bound)."""
    p = _compare_graphs(before, after, shapes, set(), seed, float("inf"), None)
    if p.method == "none":
        return p
    cos = min((s.cosine for s in p.stats), default=1.0)
    return Proof(p.method, True, None, p.stats, p.shapes,
                 f"measured, not a pass/fail: the original's own quantization noise, dropped by a rule, is what "
                 f"changed (min cosine {cos:.6f})")


def prove_unchanged(before: onnx.ModelProto, after: onnx.ModelProto) -> Proof | None:
    """A proof without running anything when the rewrite changed nothing that computes: the
    same inputs, outputs and nodes (order aside) and the same constants, compared value by
    value (a Constant node and an initializer of equal value are the same constant). None when
    anything differs: then ONNX Runtime has to show that the outputs still agree."""
    if _graph_signature(before.graph) != _graph_signature(after.graph):
        return None
    a, b = _constants(before.graph), _constants(after.graph)
    if a.keys() != b.keys():
        return None
    for name, t in a.items():
        u = b[name]
        if (t.data_type, list(t.dims)) != (u.data_type, list(u.dims)):
            return None
        if t.data_location == onnx.TensorProto.EXTERNAL or u.data_location == onnx.TensorProto.EXTERNAL:
            if t.SerializeToString() != u.SerializeToString():  # same file, offset and length
                return None
        elif not np.array_equal(numpy_helper.to_array(t), numpy_helper.to_array(u), equal_nan=True):
            return None
    return Proof("identical", True, reason="the graph is unchanged: same nodes and constants, compared value by value")


def _constants(g: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    out = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and is_default_domain(n.domain) and [a.name for a in n.attribute] == ["value"]:
            out[n.output[0]] = n.attribute[0].t
    return out


def _graph_signature(g: onnx.GraphProto) -> tuple[Any, ...]:
    """Inputs, output names and every computing node, independent of node order and of
    whether a constant is a Constant node or an initializer."""
    consts = _constants(g)
    nodes = sorted(
        (n.domain or "", n.op_type, tuple(n.input), tuple(n.output),
         tuple(sorted(a.SerializeToString() for a in n.attribute)))
        for n in g.node if not (n.output and n.output[0] in consts and n.op_type == "Constant")
    )
    inputs = tuple(sorted(i.SerializeToString() for i in g.input if i.name not in consts))
    return inputs, tuple(o.name for o in g.output), tuple(nodes)


def _load_problem(before: onnx.ModelProto, after: onnx.ModelProto) -> str | None:

    if unrunnable_outputs(before) or unrunnable_outputs(after):
        return None
    try:
        session(before)
    except InvalidModelError:
        return None
    try:
        session(after)
    except InvalidModelError as exc:
        return exc.message
    return None


def _compare_graphs(before: onnx.ModelProto, after: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                    extra_cuts: set[str], seed: int, rtol: float,
                    kept: Mapping[str, onnx.TensorProto] | None, lengths: Mapping[str, str] | None = None) -> Proof:
    """prove_graph's numbers: the two models on the same random inputs, cut where ORT cannot run;
    where the change can reach unless ``kept`` is None (then, or where the region cannot be
    isolated, both whole graphs)."""
    if approx_size(before) > PROTOBUF_LIMIT or approx_size(after) > PROTOBUF_LIMIT:
        return Proof("none", True, reason="model over 2 GB: graph proof skipped (node proofs still ran)")
    cut = unrunnable_outputs(before) | unrunnable_outputs(after) | set(extra_cuts)
    reason = (f"cut at {len(cut)} tensor(s) ONNX Runtime cannot compute"
              + (" or node proofs hold" if extra_cuts else "") if cut else "")
    nodes = (len(before.graph.node), len(after.graph.node))
    try:
        known: dict[str, tuple[list[Any], int]] = {}
        if cut:
            fixed = override_input_shapes(after, shapes) if shapes else after
            known = _known_shapes(fixed)
            missing = sorted(c for c in cut if c not in known)
            if missing:
                return Proof("none", True, reason=f"graph proof skipped: shape of {missing[0]!r} unknown "
                             "(give --shapes for dynamic inputs)")
        feeds = random_feeds(_cut(structure_only(before), cut, known) if cut else before, shapes, seed=seed,
                             lengths=lengths)
        why = ""
        if kept is not None:
            plan = change_scope(before, after, cut, kept)
            scoped = _scoped(before, after, plan, feeds, nodes) if isinstance(plan, Scope) else plan
            if not isinstance(scoped, str):
                ref, got, scope = scoped
                return _verdict(ref, got, feeds, rtol, reason if ref else reason or
                                "the change reaches no output: nothing to compare", scope)
            why = scoped
        if not is_sorted(before):
            before = sorted_copy(before)  # ONNX Runtime refuses unsorted graphs
        if cut:
            before, after = _cut(before, cut, known), _cut(after, cut, known)
        ref = run(session(before), feeds)
        types = {i.name: i.type.tensor_type.elem_type for i in after.graph.input}
        got = run(session(after), {k: v.astype(helper.tensor_dtype_to_np_dtype(types[k])) if types[k] else v
                                   for k, v in feeds.items() if k in types})  # a narrowed input: cast
    except UsageError as exc:  # its hint says what would let it run (--shapes for a dynamic input)
        return Proof("none", True, reason=f"graph proof skipped: {exc.message}" + (f"; {exc.hint}" if exc.hint else ""))
    except InvalidModelError as exc:
        return Proof("none", True, reason=f"graph proof skipped: {exc.message}")
    except TrtconvError:
        raise
    except Exception as exc:  # ORT refusing random data (e.g. an If on a sample rate): not provable here
        return Proof("none", True, reason=f"graph proof skipped: ONNX Runtime failed on random inputs: {_first(exc)}")
    whole = {"whole_graph": True, "why": why, "nodes": list(nodes),
             "nodes_run": [len(before.graph.node), len(after.graph.node)]}
    return _verdict(ref, got, feeds, rtol, reason, whole if kept is not None else {})


def _first(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _scoped(before: onnx.ModelProto, after: onnx.ModelProto, plan: Scope, feeds: Mapping[str, np.ndarray],
            nodes: tuple[int, int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]] | str:
    """The plan's outputs on both sides and its record, or why the whole graphs must run instead
    (a part that does not load or run is then judged as before: by the whole graphs)."""
    try:
        ref, got, written = run_scoped(before, after, plan, feeds)
    except OutOfMemoryError:
        raise
    except Unscoped as exc:
        return str(exc)
    except Exception as exc:  # ONNX Runtime refusing a part: the whole graphs decide, as without a plan
        return f"a part of the plan did not run: {exc.message if isinstance(exc, TrtconvError) else _first(exc)}"
    return ref, got, {**plan.to_json(nodes), "weights_written_bytes": written}


def _verdict(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray],
             rtol: float, reason: str, scope: Mapping[str, Any]) -> Proof:
    """Each output of ``ref`` against ``got``: max |err| <= rtol * max(1, max |reference|), nothing non-finite."""
    stats = []
    passed = True
    tol = 0.0
    for name, r in ref.items():
        if name not in got:
            return Proof("onnxruntime", False, reason=f"output {name!r} missing after the rewrite", scope=scope)
        if r.shape != got[name].shape:
            return Proof("onnxruntime", False, reason=f"output {name!r} shape {got[name].shape} != {r.shape}",
                         scope=scope)
        s = compare_arrays(name, r, got[name])
        t = rtol * max(1.0, float(np.abs(r.astype(np.float64)).max()) if r.size and r.dtype.kind in "fiu" else 1.0)
        tol = max(tol, t)
        passed = passed and s.nonfinite == 0 and s.max_abs <= t
        stats.append(s)
    return Proof("onnxruntime", passed, tol, tuple(stats), {k: tuple(v.shape) for k, v in sorted(feeds.items())},
                 reason, scope=scope)
