"""The base of the fused-op rules: match reads the node (kept as it was, for the proof), emit
writes standard ONNX at the model's opset, and the proof runs the *original* op in ONNX Runtime
(which implements every ``com.microsoft`` op) against the replacement on the same seeded
random inputs and the node's real weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from trtconv.onnxutil import default_opset, normalize_domain
from trtconv.reference import compare_arrays, run, session
from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import FP16_RTOL, ONNXRUNTIME, NodeProofCase, Proof, run_original
from trtconv.rewrites.rewrite_settings import RewriteSettings
from trtconv.rewrites.rule import MAX_OPSET, Emitted, NodeView, RewriteRule, RuleContext, Site
from trtconv.rewrites.transformer.fused_shapes import with_fused_shapes
from trtconv.rewrites.transformer.std_forms import MIN_OPSET, Ops

MS = "com.microsoft"
PROOF_DIM = 3  # what a dynamic dim is in a node proof (every dynamic dim alike, so they agree)


@dataclass(frozen=True)
class FusedMatch:
    original: onnx.NodeProto  # the node as it was, run by ONNX Runtime in the proof
    view: NodeView


def attr(view: NodeView, name: str, default: Any) -> Any:
    value = view.attrs.get(name, default)
    return default if value is None else value


def ints_proof_value(shape: Sequence[int], low: int, high: int, rng: np.random.Generator, dtype: Any) -> np.ndarray:
    return rng.integers(low, max(high, low + 1), size=tuple(shape)).astype(dtype)


class FusedRule(RewriteRule):
    """One fused op -> standard ONNX. Subclasses set ``name``, ``description``, ``op`` and
    write :meth:`write` (and :meth:`feed` for integer inputs)."""

    domain = MS
    op: str
    opsets: tuple[int, int] = (MIN_OPSET, MAX_OPSET)
    targets: tuple[str, ...] = ()  # every target: neither TensorRT 10/11 nor TensorRT-RTX imports these ops
    float_input = 0  # the input whose dtype the emitted float constants take

    @property
    def ops(self) -> tuple[tuple[str, str], ...]:  # type: ignore[override]
        return ((self.domain, self.op),)

    def prepare(self, model: onnx.ModelProto, settings: RewriteSettings, large: bool) -> onnx.ModelProto:
        """Shapes past this rule's op, where the model holds it at an opset the rule rewrites (the first
        rule that runs inference adds every tensor's shape; a standard LayerNormalization at opset 17 is
        no fused op: ONNX Runtime's symbolic inference, seconds on a large model, is not run for it)."""
        if not self.covers_opset(default_opset(model)):
            return model
        return with_fused_shapes(model, self.ops, large)

    def match(self, node: gs.Node, ctx: RuleContext) -> FusedMatch | None:
        view = NodeView.of_gs(node, ctx.opset, ctx.graph_outputs, ctx.shapes)
        return FusedMatch(OnnxExporter.export_node(node), view)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        """Emit the replacement writing ``outs`` (None: an output nothing reads); return what it became."""
        raise NotImplementedError

    def feed(self, view: NodeView, index: int, shape: tuple[int, ...], dtype: np.dtype,
             values: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        """A proof value for input ``index`` (``values``: the constant inputs and those drawn before it). Floats: normal noise."""
        if dtype.kind == "f":
            return rng.standard_normal(shape).astype(dtype)
        raise ValueError(f"no proof data for integer input {index} of {view.op}")

    def reference(self, view: NodeView, values: Mapping[int, np.ndarray]) -> list[np.ndarray] | None:
        """The original op's outputs in float64, for ops ONNX Runtime has no CPU kernel for
        (None: ONNX Runtime runs the original, the default)."""
        return None

    def output_shapes(self, view: NodeView) -> list[list[Any] | None]:
        """The original op's output shapes where known (default: output 0 like the float input),
        so rules further down (an Attention reading EmbedLayerNormalization's mask_index) see
        them: ONNX shape inference knows nothing of com.microsoft ops."""
        return [list(view.shapes[view.inputs[self.float_input]])
                if view.has_input(self.float_input) and view.inputs[self.float_input] in view.shapes else None]

    def emit(self, ctx: RuleContext, site: Site, match: FusedMatch) -> Emitted:
        view = match.view
        for t, shape in zip(site.outputs, self.output_shapes(view)):
            if shape is not None and isinstance(t, gs.Variable) and t.shape is None:
                t.shape = shape
        ins = [t if t.name else None for t in site.inputs]
        outs = [t if view.has_output(i) else None for i, t in enumerate(site.outputs)]
        dtype = _np_dtype(site.inputs[self.float_input])
        o = Ops(Emitter(ctx.graph, site.name), ctx.opset, dtype)
        target = self.write(o, view, ins, outs)
        return Emitted(tuple(o.em.nodes), target)

    def proof_case(self, ctx: RuleContext, site: Site, match: FusedMatch, emitted: Emitted) -> NodeProofCase | Proof:
        return prove_against_original(self, ctx, site, match, emitted)


def _shape_of(t: gs.Tensor, shapes: Mapping[str, Sequence[Any]]) -> tuple[int, ...] | None:
    if isinstance(t, gs.Constant):
        return tuple(t.values.shape)
    dims = shapes.get(t.name) or (list(t.shape) if t.shape is not None else None)
    if dims is None:
        return None
    return tuple(int(d) if isinstance(d, int) and d >= 0 else PROOF_DIM for d in dims)


def _np_dtype(t: gs.Tensor) -> np.dtype:
    if isinstance(t, gs.Constant):
        return np.asarray(t.values).dtype
    if t.dtype is None:
        return np.dtype(np.float32)
    try:
        return np.dtype(t.dtype)
    except TypeError:
        return np.dtype(helper.tensor_dtype_to_np_dtype(t.dtype))


def _mini(nodes: list[onnx.NodeProto], feeds: Mapping[str, np.ndarray], consts: Mapping[str, np.ndarray],
          outputs: Sequence[str], opset: int) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "proof",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in sorted(consts.items())],
    )
    domains = sorted({normalize_domain(n.domain) for n in nodes} - {""})
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=opsets, ir_version=9)


def prove_against_original(rule: FusedRule, ctx: RuleContext, site: Site, match: FusedMatch,
                           emitted: Emitted) -> Proof:
    """The original node and its replacement in ONNX Runtime on the same inputs: the node's
    constants (its real weights) and seeded random data for the rest; every output something
    reads is compared at ``node_tolerance * max(1, max|ref|)``."""
    rng = np.random.default_rng(ctx.settings.seed + site.index)
    feeds: dict[str, np.ndarray] = {}
    consts: dict[str, np.ndarray] = {}
    by_index = {i: np.asarray(t.values) for i, t in enumerate(site.inputs) if isinstance(t, gs.Constant)}
    for i, t in enumerate(site.inputs):
        if not t.name:
            continue
        if isinstance(t, gs.Constant):
            consts[t.name] = by_index[i]
            continue
        shape = _shape_of(t, ctx.shapes)
        if shape is None:
            return Proof("none", False, reason=_unknown_shape(t.name, ctx.settings))
        if t.name not in feeds:
            feeds[t.name] = rule.feed(match.view, i, shape, _np_dtype(t), by_index, rng)
        by_index[i] = feeds[t.name]
    outputs = [name for i, name in enumerate(match.view.outputs) if match.view.has_output(i)]
    opset = max(ctx.opset, MIN_OPSET)
    replacement = [OnnxExporter.export_node(n) for n in emitted.nodes]
    inner = {c.name: np.asarray(c.values) for n in emitted.nodes for c in n.inputs if isinstance(c, gs.Constant)}
    own = rule.reference(match.view, by_index)
    against = f"against ONNX Runtime's {site.op}" if own is None else f"against a float64 reference of {site.op}"
    ref = (run_original(_mini([match.original], feeds, consts, outputs, opset), feeds, outputs) if own is None
           else {name: value for name, value in zip(outputs, own)})
    try:
        got = run(session(_mini(replacement, feeds, {**consts, **inner}, outputs, opset)), feeds, outputs)
    except Exception as exc:
        return Proof(ONNXRUNTIME, False, reason=f"replacement failed to run: {_first(exc)}")
    stats = []
    tol = 0.0
    passed = True
    for name in outputs:
        r, g = ref[name], got[name]
        if r.shape != g.shape:
            return Proof(ONNXRUNTIME, False, reason=f"output {name!r} shape {g.shape} != the original's {r.shape}")
        s = compare_arrays(name, r, g)
        rtol = max(ctx.settings.node_tolerance, FP16_RTOL) if r.dtype == np.float16 else ctx.settings.node_tolerance
        t = rtol * max(1.0, float(np.abs(r.astype(np.float64)).max()) if r.size else 1.0)
        tol = max(tol, t)
        passed = passed and s.nonfinite == 0 and s.max_abs <= t
        stats.append(s)
    return Proof(ONNXRUNTIME, passed, tol, tuple(stats), {k: tuple(v.shape) for k, v in sorted(feeds.items())},
                 against)


def _unknown_shape(name: str, settings: RewriteSettings) -> str:
    """Why a proof has no data for ``name``; "give --shapes" only where no shapes were given."""
    if settings.shapes or settings.proof_shapes:
        return (f"the shape of input {name!r} is unknown: shape inference (ONNX's and ONNX Runtime's symbolic one) "
                "does not reach it from the given input shapes, so the rewrite cannot be proven (--no-verify skips "
                "the proofs)")
    return f"the shape of input {name!r} is unknown, so the rewrite cannot be proven (give --shapes, or --no-verify)"


def _first(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
