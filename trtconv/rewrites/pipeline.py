"""Stage 3 as one pure function: ``rewrite(model, settings) -> RewriteResult(model, report)``.

Order: input-shape overrides; dead-node removal; constant folding (first, so exporters'
Shape/Slice chains give the rules concrete shapes); custom-op rewrites (plugin map first,
then the built-in DCN rules), each proven on its own; INT64→INT32 initializers;
topological sort; opset conversion when DeformConv needs opset 19;
unused opset imports dropped; then the whole graph is proven against the original.
Nothing depends on time, paths or randomness without a seed, so equal inputs give
byte-equal outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import version_converter

from trtconv.errors import AccuracyError, UnsupportedModelError, UsageError
from trtconv.load.model import PROTOBUF_LIMIT, LoadedModel, _approx_size, iter_graphs
from trtconv.load.shapes import Shape, override_input_shapes, value_shapes
from trtconv.rewrites import cleanup, dcn, dcn_portable
from trtconv.rewrites.catalog import rewrite_rule_for
from trtconv.rewrites.pluginmap import PlannedPluginNode, PluginMap
from trtconv.rewrites.pluginmap import emit as emit_plugin
from trtconv.rewrites.pluginmap import plan as plan_plugin
from trtconv.rewrites.proof import (
    GRAPH_RTOL,
    NODE_RTOL,
    ORT_TARGET_OPSETS,
    STANDARD_DOMAINS,
    Proof,
    prove_dcn,
    prove_graph,
)

SCHEMA = "trtconv.rewrite/1"
DEFAULT_FOLD_LIMIT = 16 << 20  # bytes: larger folded tensors stay as nodes


@dataclass(frozen=True)
class RewriteSettings:
    """What ``rewrite`` does. Frozen: the same settings and model always give the same bytes."""

    dcn_target: str = dcn.DEFAULT_TARGET  # "deformconv" | "trt-plugin" | "trtconv-plugin" | "portable"
    dcn_plugin: dcn.PluginSpec | None = None  # required for "trtconv-plugin" (load_plugin_spec)
    plugin_map: PluginMap | None = None
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    fold_constants: bool = True
    fold_size_limit: int = DEFAULT_FOLD_LIMIT
    remove_dead_nodes: bool = True
    int64_to_int32: bool = True
    prune_opsets: bool = True
    verify: bool = True
    seed: int = 0
    # proofs pass when max |err| <= tolerance * max(1, max |reference|)
    node_tolerance: float = NODE_RTOL
    graph_tolerance: float = GRAPH_RTOL
    # Models above this many bytes of weights take the large-model path: no protobuf
    # serialization in memory (no folding, no graph proof), external data on save.
    large_model_bytes: int = PROTOBUF_LIMIT

    def to_json(self) -> dict[str, Any]:
        return {
            "dcn_target": self.dcn_target,
            "dcn_plugin": None if self.dcn_plugin is None else
            f"{self.dcn_plugin.namespace}::{self.dcn_plugin.name} v{self.dcn_plugin.version}",
            "plugin_map": None if self.plugin_map is None else self.plugin_map.source,
            "shapes": {k: list(v) for k, v in sorted(self.shapes.items())},
            "fold_constants": self.fold_constants,
            "fold_size_limit": self.fold_size_limit,
            "remove_dead_nodes": self.remove_dead_nodes,
            "int64_to_int32": self.int64_to_int32,
            "prune_opsets": self.prune_opsets,
            "verify": self.verify,
            "seed": self.seed,
            "node_tolerance": self.node_tolerance,
            "graph_tolerance": self.graph_tolerance,
        }


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op: str  # "domain::Op" or "Op" for the default domain
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any]

    @staticmethod
    def of(node: gs.Node) -> NodeInfo:
        op = f"{node.domain}::{node.op}" if node.domain not in (None, "", "ai.onnx", dcn.PENDING_DOMAIN) else node.op
        return NodeInfo(node.name, op, tuple(t.name for t in node.inputs), tuple(t.name for t in node.outputs),
                        {k: _jsonable(v) for k, v in sorted(node.attrs.items())})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "attributes": dict(self.attributes)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist() if v.size <= 16 else f"<tensor {v.dtype} {list(v.shape)}>"
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, gs.Graph):
        return f"<graph {v.name}>"
    if isinstance(v, gs.Constant):
        return _jsonable(np.asarray(v.values))
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


@dataclass(frozen=True)
class RewriteEntry:
    node: str
    rule: str
    target: str
    before: NodeInfo
    after: tuple[NodeInfo, ...]
    proof: Proof
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "rule": self.rule, "target": self.target, "before": self.before.to_json(),
                "after": [a.to_json() for a in self.after], "proof": self.proof.to_json(), "notes": list(self.notes)}


@dataclass(frozen=True)
class RewriteReport:
    """Everything ``rewrite`` did, for humans (``to_text``) and machines (``to_json``, schema trtconv.rewrite/1)."""

    settings: RewriteSettings
    rewrites: tuple[RewriteEntry, ...]
    cleanups: tuple[cleanup.CleanupResult, ...]
    graph_proof: Proof
    nodes_before: int
    nodes_after: int
    opset_before: int
    opset_after: int
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "settings": self.settings.to_json(),
            "rewrites": [r.to_json() for r in self.rewrites],
            "cleanups": [c.to_json() for c in self.cleanups],
            "graph_proof": self.graph_proof.to_json(),
            "summary": {
                "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after,
                "rewritten": len(self.rewrites),
                "opset_before": self.opset_before,
                "opset_after": self.opset_after,
            },
            "notes": list(self.notes),
        }

    def to_text(self) -> str:
        lines = [f"rewrote {len(self.rewrites)} node(s); nodes {self.nodes_before} -> {self.nodes_after}; "
                 f"opset {self.opset_before} -> {self.opset_after}"]
        for r in self.rewrites:
            after = ", ".join(a.op for a in r.after)
            proof = _proof_text(r.proof)
            lines.append(f"  {r.node}: {r.rule}: {r.before.op} -> {after}  [{proof}]")
            lines.extend(f"    note: {n}" for n in r.notes)
        for c in self.cleanups:
            if c.count or c.notes:
                detail = f": {', '.join(c.items[:5])}{' ...' if len(c.items) > 5 else ''}" if c.items else ""
                lines.append(f"  {c.rule}: {c.count}{detail}")
                lines.extend(f"    note: {n}" for n in c.notes if c.count or c.rule != "fold-constants")
        lines.append(f"  graph proof: {_proof_text(self.graph_proof)}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _proof_text(p: Proof) -> str:
    if p.method == "none":
        return p.reason or "not proven"
    status = "passed" if p.passed else "FAILED"
    err = f" max|err| {p.max_abs:.2g} <= {p.tolerance:.2g}" if p.max_abs is not None and p.tolerance else ""
    return f"{p.method} {status}{err}" + (f" ({p.reason})" if p.reason else "")


@dataclass(frozen=True)
class RewriteResult:
    model: onnx.ModelProto
    report: RewriteReport


def _default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def _count_nodes(model: onnx.ModelProto) -> int:

    return sum(len(g.node) for g in iter_graphs(model.graph))


def _inferred(model: onnx.ModelProto, large: bool) -> onnx.ModelProto:
    if large:
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # custom ops: keep what is known
        return model


def _value_shapes(model: onnx.ModelProto) -> dict[str, list[Any]]:

    return value_shapes(model)


def _subgraph_notes(model: onnx.ModelProto) -> list[str]:

    notes = []
    for g in list(iter_graphs(model.graph))[1:]:
        for n in g.node:
            if rewrite_rule_for(n.domain, n.op_type) is not None:
                notes.append(f"node {n.name!r} ({n.op_type}) sits inside a subgraph and was not rewritten")
    return notes


def _check_settings(settings: RewriteSettings) -> None:
    if settings.dcn_target not in dcn.TARGETS:
        raise UsageError(f"unknown DCN target {settings.dcn_target!r}", hint=f"choose one of {', '.join(dcn.TARGETS)}")
    if settings.dcn_target == "trtconv-plugin" and settings.dcn_plugin is None:
        raise UsageError("DCN target trtconv-plugin needs the plugin's spec",
                         hint="pass --dcn-plugin-spec plugins/dcnv2/spec.json")
    if not (settings.node_tolerance >= 0 and settings.graph_tolerance >= 0):
        raise UsageError("proof tolerances must be >= 0")
    if settings.fold_size_limit < 0:
        raise UsageError("the constant-folding size limit must be >= 0")


def rewrite(loaded_or_model: LoadedModel | onnx.ModelProto, settings: RewriteSettings | None = None) -> RewriteResult:
    """Rewrite a model for TensorRT; raise AccuracyError if any proof fails (nothing is returned then)."""
    settings = settings or RewriteSettings()
    _check_settings(settings)
    src = loaded_or_model.proto if isinstance(loaded_or_model, LoadedModel) else loaded_or_model
    if isinstance(loaded_or_model, LoadedModel) and not loaded_or_model.weights_loaded:
        raise UsageError("rewrite needs the model's weights", hint="load it with load_model(path) (weights on)")
    _refuse_empty_list_attributes(src)
    original = onnx.ModelProto()
    original.CopyFrom(src)
    model = override_input_shapes(original, settings.shapes) if settings.shapes else original
    large = _approx_size(model) > settings.large_model_bytes
    opset_before = _default_opset(model)
    nodes_before = _count_nodes(model)
    was_sorted = cleanup.is_sorted(model)
    notes = _subgraph_notes(model)
    if settings.dcn_target == dcn_portable.TARGET and not large:
        model = dcn_portable.with_dcn_output_shapes(model)  # it needs every DCN input's channel count
    # Imported with inferred shapes: graphsurgeon folds Shape nodes only where shapes are known.
    graph = gs.import_onnx(_inferred(model, large))
    graph.toposort()  # rules below walk producers before consumers
    results: list[cleanup.CleanupResult] = []
    if settings.remove_dead_nodes:  # before folding, which would otherwise sweep them up uncounted
        results.append(cleanup.remove_dead(graph))
    # Fold first: exporters compute offsets' shapes with Shape/Slice chains, and only
    # folded graphs give the DCN rules (and their proofs) concrete shapes.
    if settings.fold_constants:
        if large:
            results.append(cleanup.CleanupResult("fold-constants", 0, notes=("skipped: model over the large-model "
                                                                             "threshold",)))
        else:
            results.append(cleanup.fold_constants(graph, settings.fold_size_limit))
        folded = gs.export_onnx(graph, do_type_check=False)
        _copy_model_fields(model, folded)
        shapes = _value_shapes(_inferred(folded, large))
    else:
        shapes = _value_shapes(_inferred(model, large))
    tensors = graph.tensors()

    # Plan every plugin-map rewrite first: a bad map fails before anything is built.
    planned: dict[int, PlannedPluginNode] = {}
    if settings.plugin_map is not None:
        for node in graph.nodes:
            op = settings.plugin_map.lookup(node.domain or "", node.op)
            if op is not None:
                planned[id(node)] = plan_plugin(op, node, frozenset(t.name for t in graph.outputs))

    entries: list[RewriteEntry] = []
    failures: list[str] = []
    pending_opset = 0  # opset the emitted pending-domain nodes need (0: none emitted)
    # DCNs computed another way than the original (portable: sampling then a 1x1 Conv, rounded
    # differently): the node proof holds them to the float64 reference; the graph proof, whose
    # 1e-6 is for exact rewrites, is cut at their outputs and compares everything else.
    graph_cuts: set[str] = set()
    new_order: list[gs.Node] = []
    used_names = {n.name for n in graph.nodes}
    bases: set[str] = set()  # replacement nodes and tensors are named "<base>/...": keep bases unique
    for index, node in enumerate(list(graph.nodes)):
        name = node.name or f"{node.op}_{index}"
        if (name != node.name and name in used_names) or name in bases:
            name = f"{name}_{index}"
        bases.add(name)
        rule = rewrite_rule_for(node.domain or "", node.op)
        if id(node) in planned:
            before = NodeInfo.of(node)
            ins, outs = list(node.inputs), list(node.outputs)
            node.inputs.clear()
            node.outputs.clear()
            p = planned[id(node)]
            new = emit_plugin(graph, name, p, ins, outs)
            new_order.append(new)
            reason = (f"not numeric: {p.op.plugin_name} has no CPU implementation; "
                      "structure and attribute types checked")
            note = (f"attributes not mapped (dropped): {', '.join(p.dropped)}",) if p.dropped else ()
            entries.append(RewriteEntry(name, "plugin-map", f"{p.op.plugin_name} v{p.op.plugin_version}", before,
                                        (NodeInfo.of(new),), Proof("none", True, reason=reason), note))
            continue
        dcn_node = dcn.read_dcn(node) if rule is not None else None
        if dcn_node is None or rule is None:
            new_order.append(node)
            continue
        needs_pad_fix = dcn_node.params.pads[:2] != dcn_node.params.pads[2:]
        if dcn_node.dialect == "onnx" and settings.dcn_target == "deformconv" and not needs_pad_fix:
            new_order.append(node)  # TensorRT imports it as is
            continue
        plugin = (settings.dcn_plugin if settings.dcn_target == "trtconv-plugin"
                  else dcn.TRT_MODULATED_DEFORM_CONV if settings.dcn_target == "trt-plugin" else None)
        before = NodeInfo.of(node)
        wt = tensors.get(dcn_node.weight)
        wshape = tuple(wt.shape) if isinstance(wt, gs.Constant) else tuple(shapes.get(dcn_node.weight) or ())
        ins, outs = list(node.inputs), list(node.outputs)
        node.inputs.clear()
        node.outputs.clear()
        _annotate_output(outs[0], shapes, dcn_node, wshape, tensors)
        portable = settings.dcn_target == dcn_portable.TARGET
        new_nodes = (dcn_portable.emit(graph, name, dcn_node, tensors, outs) if portable
                     else dcn.emit(graph, name, dcn_node, settings.dcn_target, tensors, outs, plugin))
        new_order.extend(new_nodes)
        pending_opset = max(pending_opset, ORT_TARGET_OPSETS.get(settings.dcn_target, 0))
        if portable:
            graph_cuts.add(outs[0].name)
        node_notes = list(dcn_node.notes)
        if needs_pad_fix and not portable:  # the portable form just moves its taps
            node_notes.append(f"asymmetric pads {list(dcn_node.params.pads)}: explicit zero Pad + symmetric pads"
                              if settings.dcn_target == "deformconv" or (plugin and plugin.symmetric_pads)
                              else f"asymmetric pads {list(dcn_node.params.pads)} passed to the plugin")
        if dcn_node.params.stride[0] != dcn_node.params.stride[1] or \
                dcn_node.params.dilation[0] != dcn_node.params.dilation[1] or \
                dcn_node.params.pads[0] != dcn_node.params.pads[1]:
            if settings.dcn_target not in ("trtconv-plugin", dcn_portable.TARGET):
                node_notes.append("anisotropic stride/padding/dilation: TensorRT's ModulatedDeformConv2d may swap "
                                  "h and w (by code reading); verify the engine with `trtconv verify`")
        if settings.verify:
            if len(wshape) != 4 or not all(isinstance(d, int) for d in wshape):
                raise UnsupportedModelError(
                    f"node {name!r} ({node.op}): the weight's shape is unknown, so the rewrite cannot be proven",
                    hint="give --shapes for dynamic inputs, or --no-verify to skip the proof",
                )
            consts = {t.name: np.asarray(t.values) for t in ins if isinstance(t, gs.Constant)}
            xt = tensors.get(dcn_node.x)  # an earlier DCN's output: shaped by _annotate_output only
            xshape = shapes.get(dcn_node.x) or (list(xt.shape) if xt is not None and xt.shape is not None else None)
            proof = prove_dcn(dcn_node, new_nodes, outs[0].name, consts, wshape, xshape,
                              settings.dcn_target, plugin, max(opset_before, 11), settings.seed + index,
                              settings.node_tolerance, _dtype(tensors.get(dcn_node.x), wt))
            if not proof.passed:
                why = (f"max abs error {proof.max_abs:.3g} > {proof.tolerance:.3g}" if proof.max_abs is not None
                       and proof.tolerance is not None else proof.reason)
                failures.append(f"node {name!r} ({rule.name} -> {settings.dcn_target}): {why}")
        else:
            proof = Proof("none", True, reason="--no-verify")
        entries.append(RewriteEntry(name, rule.name, settings.dcn_target, before,
                                    tuple(NodeInfo.of(n) for n in new_nodes), proof, tuple(node_notes)))
    graph.nodes = new_order
    if failures:
        raise AccuracyError("rewrite proof failed: " + "; ".join(failures),
                            hint="nothing was written; the replacement does not compute what the original op does "
                                 "(or --tolerance is tighter than float32 allows); please report it with the model")

    if settings.remove_dead_nodes:
        graph.cleanup(remove_unused_graph_inputs=False)  # what the rewrites left unused (old weights)
    if settings.int64_to_int32:
        results.append(cleanup.int64_to_int32(graph))
    results.append(cleanup.toposort(graph, was_sorted))

    out = gs.export_onnx(graph, do_type_check=False)
    _copy_model_fields(model, out)
    _strip_value_info(out)
    results.append(cleanup.rename_shared_dims(out))
    if pending_opset:
        out = _finish_pending(out, large, results, pending_opset)
        _strip_value_info(out)  # the opset converter's inferred shapes stop at pending nodes: partial
    if settings.prune_opsets:
        results.append(cleanup.prune_opsets(out))

    if settings.verify and not large:
        # cut only where ONNX Runtime cannot run a node: a rewritten DeformConv is compared end to end
        reference = model if was_sorted else _sorted_copy(model)  # ONNX Runtime refuses unsorted graphs
        gproof = prove_graph(reference, out, settings.shapes, graph_cuts, settings.seed, settings.graph_tolerance)
        if not gproof.passed:
            bad = [f"{s.name}: max abs {s.max_abs:.3g}" for s in gproof.stats if s.max_abs > (gproof.tolerance or 0)]
            raise AccuracyError("rewrite changed the model's outputs: " + ("; ".join(bad) or gproof.reason),
                                hint="nothing was written; retry with --no-fold or --no-int32 and report the model")
    else:
        gproof = Proof("none", True, reason="--no-verify" if not settings.verify else
                       "model over the large-model threshold: graph proof skipped (node proofs still ran)")
    report = RewriteReport(settings, tuple(entries), tuple(results), gproof, nodes_before, _count_nodes(out),
                           opset_before, _default_opset(out), tuple(notes))
    return RewriteResult(out, report)


def _refuse_empty_list_attributes(model: onnx.ModelProto) -> None:
    """onnx-graphsurgeon cannot export an attribute that is an empty list (it infers the
    type from the first element): say so up front instead of failing after the work."""

    lists = (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS)
    for g in iter_graphs(model.graph):
        for node in g.node:
            for a in node.attribute:
                if a.type in lists and not (a.ints or a.floats or a.strings):
                    raise UnsupportedModelError(
                        f"node {node.name or node.op_type!r}: attribute {a.name!r} is an empty list, "
                        "which onnx-graphsurgeon cannot write back",
                        hint="remove the attribute from the model (an absent attribute means its default)",
                    )


def _sorted_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph in topological order and nothing else changed: the reference for unsorted inputs."""
    g = gs.import_onnx(model)
    g.toposort()
    out = gs.export_onnx(g, do_type_check=False)
    _copy_model_fields(model, out)
    return out


def _dtype(*candidates: gs.Tensor | None) -> np.dtype | None:
    for t in candidates:
        if t is not None and t.dtype is not None:
            try:
                return np.dtype(t.dtype)
            except TypeError:
                continue
    return None


def _annotate_output(out: gs.Tensor, shapes: Mapping[str, list[Any]], d: dcn.DcnNode, wshape: tuple[Any, ...],
                     tensors: Mapping[str, gs.Tensor]) -> None:
    """Give the DCN output its shape [N, Cout, OH, OW], so shape inference (and proofs) go past a plugin node."""
    if not isinstance(out, gs.Variable):
        return
    xs, offs = shapes.get(d.x), shapes.get(d.offset)
    have = list(out.shape) if out.shape is not None and len(out.shape) == 4 else [None] * 4
    if xs and offs and len(xs) == 4 and len(offs) == 4 and wshape:
        dims = [xs[0], wshape[0], offs[2], offs[3]]
        merged = [d if isinstance(d, int) else h if h is not None else d for d, h in zip(dims, have)]
        if all(isinstance(v, (int, str)) for v in merged):
            out.shape = merged
    if out.dtype is None:
        x = tensors.get(d.x)
        if x is not None and x.dtype is not None:
            out.dtype = x.dtype


def _strip_value_info(model: onnx.ModelProto) -> None:
    """Drop inferred shapes we imported (they may be stale after edits) but keep those of
    custom-op outputs: no shape inference can recreate them."""

    for g in iter_graphs(model.graph):
        custom = {o for n in g.node if n.domain not in STANDARD_DOMAINS for o in n.output}
        keep = [vi for vi in g.value_info if vi.name in custom]
        del g.value_info[:]
        g.value_info.extend(keep)


def _copy_model_fields(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    """graphsurgeon's export drops model-level fields; keep them (and the original opset versions)."""
    dst.ir_version = src.ir_version
    dst.producer_name = src.producer_name
    dst.producer_version = src.producer_version
    dst.domain = src.domain
    dst.model_version = src.model_version
    dst.doc_string = src.doc_string
    del dst.metadata_props[:]
    dst.metadata_props.extend(src.metadata_props)
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in src.opset_import}
    have = {("" if o.domain == "ai.onnx" else o.domain) for o in dst.opset_import}
    for o in dst.opset_import:
        dom = "" if o.domain == "ai.onnx" else o.domain
        if dom in versions:
            o.version = versions[dom]
    for dom, ver in sorted(versions.items()):
        if dom not in have:
            dst.opset_import.append(onnx.helper.make_opsetid(dom, ver))


def _finish_pending(model: onnx.ModelProto, large: bool, results: list[cleanup.CleanupResult],
                    need: int) -> onnx.ModelProto:
    """Raise the default opset to ``need`` (19 for DeformConv, 16 for GridSample) if lower,
    then move the pending nodes into the default domain."""

    opset = _default_opset(model)
    what = "DeformConv" if need == dcn.DEFORMCONV_OPSET else "GridSample"
    if opset < need:
        if large:
            raise UnsupportedModelError(
                f"{what} needs opset {need}; this model is opset {opset} and too large to convert",
                hint=f"re-export at opset >= {need}, or use --dcn-target trt-plugin",
            )

        ir_version = model.ir_version
        try:
            model = version_converter.convert_version(model, need)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnsupportedModelError(
                f"cannot raise the model's opset from {opset} to {need} for {what}: {first[:300]}",
                hint=f"re-export at opset >= {need}, or use --dcn-target trt-plugin",
            ) from exc
        model.ir_version = max(ir_version, 9 if need >= 19 else 8)  # opset 19 needs IR 9; 16 IR 8
        results.append(cleanup.CleanupResult("opset-conversion", 1, (f"ai.onnx {opset} -> {need}",),
                                             ("onnx.version_converter; proven by the graph proof",)))
    for g in iter_graphs(model.graph):
        for n in g.node:
            if n.domain == dcn.PENDING_DOMAIN:
                n.domain = ""
    keep = [o for o in model.opset_import if o.domain != dcn.PENDING_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return model
