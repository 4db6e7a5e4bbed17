"""Stage 3 as one pure function: ``rewrite(model, settings) -> RewriteResult(model, report)``.

Order: input-shape overrides; dead-node removal; constant folding (first, so exporters'
Shape/Slice chains give the rules concrete shapes); the rules (:mod:`.catalog`: the plugin
map first, then the built-in ones), each replacement proven on its own; INT64→INT32
initializers; topological sort; opset conversion when a replacement needs a newer opset;
unused opset imports dropped; then the graph is proven against the original where the change
can reach (the rest runs once, on the original; :mod:`.change_scope`).
Nothing depends on time, paths or randomness without a seed, so equal inputs give
byte-equal outputs.

The driver is generic: what a rule matches, emits and proves is the rule's business
(:mod:`.rule`). A failed proof is an error, or, with ``RewriteSettings.step_aside`` (``build``),
the rewrite that failed is dropped and the model rewritten again without it (:func:`rewrite`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from trtconv.errors import AccuracyError, InvalidModelError, TrtconvError, UsageError
from trtconv.load import LoadedModel, Shape, override_input_shapes, value_shapes, weight_bytes
from trtconv.onnxutil import (
    ORT_DOMAINS,
    default_opset,
    fresh_name,
    is_sorted,
    iter_graphs,
    length_inputs,
    normalize_domain,
)
from trtconv.reference import ort
from trtconv.rewrites import cleanup
from trtconv.rewrites.catalog import active_rules, check_settings, rewrite_rule_for, rule_among
from trtconv.rewrites.dtype_narrowing import DtypeChange, narrow_float64
from trtconv.rewrites.proof import (
    OriginalDidNotRun,
    Proof,
    arithmetic,
    measure_drift,
    prove_graph,
    prove_node,
    prove_unchanged,
)
from trtconv.rewrites.rewrite_report import NodeInfo, RewriteEntry, RewriteReport, RewriteResult, SteppedAside
from trtconv.rewrites.rewrite_settings import RewriteSettings
from trtconv.rewrites.roundtrip import (
    export,
    import_with_shapes,
    inferred,
    kept_weights,
    load_foldable,
    refuse_empty_list_attributes,
    sorted_copy,
    strip_value_info,
)
from trtconv.rewrites.rule import Emitted, ModelFacts, NodeView, RewriteRule, RuleContext, Site


def _computing_nodes(graph: gs.Graph) -> int:
    """Nodes other than Constant: folding that only lowers Constant nodes changes no shape."""
    return sum(1 for n in graph.nodes if n.op != "Constant")


def _count_nodes(model: onnx.ModelProto) -> int:
    return sum(len(g.node) for g in iter_graphs(model.graph))


def _subgraph_notes(model: onnx.ModelProto) -> list[str]:
    notes = []
    for g in list(iter_graphs(model.graph))[1:]:
        for n in g.node:
            if rewrite_rule_for(n.domain, n.op_type, default_opset(model)) is not None:
                notes.append(f"node {n.name!r} ({n.op_type}) sits inside a subgraph and was not rewritten")
    return notes


def _weights_no_longer_inputs(model: onnx.ModelProto, out: onnx.ModelProto) -> list[str]:
    """Weights the model also lists as graph inputs (IR 3 lists every weight so; from IR 4 it makes them
    defaults a caller may feed) leave the inputs in the round trip: an interface change, said."""
    weights = {t.name for t in model.graph.initializer}
    inputs = {i.name for i in out.graph.input}
    gone = [i.name for i in model.graph.input if i.name in weights and i.name not in inputs]
    if not gone:
        return []
    names = ", ".join(repr(n) for n in gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
    return [f"{len(gone)} weight(s) the model also listed as graph inputs (IR {model.ir_version}) are weights only "
            f"now, no longer inputs a caller could feed: {names}"]


@dataclass
class _Applied:
    """What the rules did to the graph, for the report and the steps after them."""

    entries: list[RewriteEntry]
    notes: list[str]  # nodes a rule covers but refused, and why
    pending: dict[int, set[str]]  # opset -> the ops that need it (emitted in PENDING_DOMAIN)
    graph_cuts: set[str]
    inexact: bool = False  # a replacement changed the numbers on purpose (Emitted.exact False)
    reorders_sums: bool = False  # a replacement sums in another order (Emitted.reorders_sums)


class _StepAside(Exception):
    """This attempt's failed proofs (``RewriteSettings.step_aside``): ``rewrite`` starts again without them."""

    def __init__(self, sites: tuple[SteppedAside, ...]) -> None:
        super().__init__("; ".join(a.describe() for a in sites))
        self.sites = sites


def _node_proof(rule: RewriteRule, ctx: RuleContext, site: Site, match: object, emitted: Emitted) -> Proof:
    """The rule's proof of one replacement; a prologue that could not run the original is a failed proof,
    and so (with ``step_aside``) is a proof that could not run at all: the rewrite steps aside."""
    try:
        case = rule.proof_case(ctx, site, match, emitted)
    except OriginalDidNotRun as exc:
        return exc.proof
    except TrtconvError:
        raise
    except Exception as exc:  # a rule's proof that fails to set itself up: without step_aside, a bug to report
        if not ctx.settings.step_aside:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Proof("none", False, reason=f"the proof could not run: {type(exc).__name__}: {first[:200]}")
    return case if isinstance(case, Proof) else prove_node(case)


def _apply_rules(graph: gs.Graph, ctx: RuleContext, rules: tuple[RewriteRule, ...],
                 aside: frozenset[str] = frozenset()) -> _Applied:
    """Every node a rule matches, replaced and (with settings.verify) proven; AccuracyError if a proof
    fails (_StepAside with settings.step_aside). ``aside``: the nodes whose rewrite an earlier attempt
    dropped: left as they are."""
    settings = ctx.settings
    covered = [(node, rule_among(rules, node.domain, node.op, ctx.opset)) for node in graph.nodes]
    for node, rule in covered:  # a rule that refuses a node does so before anything is built
        if rule is not None:
            rule.precheck(node, ctx)
    applied = _Applied([], [], {}, set())
    failures: list[str] = []
    dropped: list[SteppedAside] = []
    new_order: list[gs.Node] = []
    used_names = {n.name for n in graph.nodes}
    bases: set[str] = set()  # replacement nodes and tensors are named "<base>/...": keep bases unique
    absorbed: set[int] = set()  # id() of nodes a replacement stands for: dropped, never visited
    for index, (node, rule) in enumerate(covered):
        if id(node) in absorbed:
            continue
        # an unnamed node's made-up name must not be another node's either
        name = fresh_name(node.name or f"{node.op}_{index}", bases if node.name else bases | used_names)
        bases.add(name)
        view = NodeView.of_gs(node, ctx.opset, ctx.graph_outputs, ctx.shapes) if rule is not None else None
        refused = rule.refusal(view) if rule is not None and view is not None else None
        if refused and rule is not None:
            applied.notes.append(f"node {name!r} ({node.op}) left as is: {rule.name} cannot rewrite it: {refused}")
            new_order.append(node)
            continue
        match = rule.match(node, ctx) if rule is not None and name not in aside else None
        if rule is None or match is None:
            new_order.append(node)
            continue
        before = NodeInfo.of(node)
        site = Site(name, index, node.op, tuple(node.inputs), tuple(node.outputs))
        node.inputs.clear()
        node.outputs.clear()
        emitted = rule.emit(ctx, site, match)
        new_order.extend(emitted.nodes)
        if emitted.pending_opset:
            applied.pending.setdefault(emitted.pending_opset, set()).add(emitted.pending_op)
        applied.graph_cuts |= emitted.graph_cuts
        absorbed.update(id(n) for n in emitted.absorbed)
        applied.inexact = applied.inexact or not emitted.exact
        applied.reorders_sums = applied.reorders_sums or emitted.reorders_sums
        if settings.verify:
            proof = _node_proof(rule, ctx, site, match, emitted)
            if not proof.passed:
                why = (f"max abs error {proof.max_abs:.3g} > {proof.tolerance:.3g}" if proof.max_abs is not None
                       and proof.tolerance is not None else proof.reason)
                failures.append(f"node {name!r} ({rule.name} -> {emitted.target}): {why}")
                dropped.append(SteppedAside(name, site.op, rule.name, why))
        else:
            proof = rule.unproven(match)
        applied.entries.append(RewriteEntry(name, rule.name, emitted.target, before,
                                            tuple(NodeInfo.of(n) for n in emitted.nodes), proof, emitted.notes))
    graph.nodes = [n for n in new_order if id(n) not in absorbed]
    if dropped and settings.step_aside:
        raise _StepAside(tuple(dropped))
    if failures:
        raise AccuracyError("rewrite proof failed: " + "; ".join(failures),
                            hint="nothing was written; the replacement does not compute what the original op does "
                                 "(or --tolerance is tighter than float32 allows); please report it with the model")
    return applied


# The clean-ups a failed graph proof may drop, and the setting that turns each off.
CLEANUP_SWITCHES = {"int64-to-int32": "int64_to_int32", "fold-constants": "fold_constants"}
RULES = "rules"  # a variant that drops every rewrite the failed attempt made


class _GraphFailed(Exception):
    """The graph proof failed (or ONNX Runtime refused the result) with ``step_aside`` on; ``rewritten``:
    the rewrites that attempt made, as the entries that would drop them."""

    def __init__(self, error: AccuracyError, rewritten: tuple[SteppedAside, ...]) -> None:
        super().__init__(error.message)
        self.error = error
        self.rewritten = rewritten


def rewrite(loaded_or_model: LoadedModel | onnx.ModelProto, settings: RewriteSettings | None = None, *,
            rules: Sequence[RewriteRule] | None = None) -> RewriteResult:
    """Rewrite a model for TensorRT; raise AccuracyError if any proof fails (nothing is returned then).
    With ``settings.step_aside`` (``build``) a failed proof drops that rewrite instead and the model is
    rewritten again without it: a node proof drops its rule at that node (the node stays as it was); a
    failed graph proof drops one clean-up of CLEANUP_SWITCHES, else the rules' rewrites, else all of
    them (the first that passes). ``report.stepped_aside`` says what and why; AccuracyError (the first
    failure) only when nothing passes.

    ``rules``: the rules to apply, first match wins (default: the plugin map's, then the catalog's).
    """
    settings = settings or RewriteSettings()
    check_settings(settings)
    src = loaded_or_model.proto if isinstance(loaded_or_model, LoadedModel) else loaded_or_model
    if isinstance(loaded_or_model, LoadedModel) and not loaded_or_model.weights_loaded:
        raise UsageError("rewrite needs the model's weights", hint="load it with load_model(path) (weights on)")
    refuse_empty_list_attributes(src)
    try:
        return _nodes_aside(src, settings, rules, ())
    except _GraphFailed as exc:
        first = exc
    on = [c for c, flag in CLEANUP_SWITCHES.items() if getattr(settings, flag)]
    variants = [(c,) for c in on] + [(RULES,)] * bool(first.rewritten) + [(*on, RULES)] * bool(on and first.rewritten)
    for drop in variants:
        why = f"the whole-graph proof failed with it: {first.error.message}"
        aside = tuple(SteppedAside("", "", c, why) for c in drop if c != RULES)
        aside += first.rewritten if RULES in drop else ()
        off: dict[str, Any] = {CLEANUP_SWITCHES[c]: False for c in drop if c != RULES}
        try:
            return _nodes_aside(src, replace(settings, **off), rules, aside)
        except _GraphFailed:
            continue
    raise first.error from None


def _nodes_aside(src: onnx.ModelProto, settings: RewriteSettings, rules: Sequence[RewriteRule] | None,
                 aside: tuple[SteppedAside, ...]) -> RewriteResult:
    """Attempts until no node proof fails, each leaving the nodes whose proof failed before as they were
    (each drops at least one more, so it ends); _GraphFailed when the graph proof fails."""
    while True:
        try:
            result = _attempt(src, settings, rules, aside)
        except _StepAside as exc:
            aside += exc.sites
            continue
        if not aside:
            return result
        return RewriteResult(result.model, replace(result.report, stepped_aside=aside))


def _attempt(src: onnx.ModelProto, settings: RewriteSettings, rules: Sequence[RewriteRule] | None,
             aside: tuple[SteppedAside, ...]) -> RewriteResult:
    """One pass of the rewrite, leaving the nodes of ``aside`` as they are. Over 80 lines: the steps of
    the module docstring in their order, each a line or two, with what they hand on."""
    # Not copied: nothing below edits ``src`` (graphsurgeon reads it, rules' prepare steps and
    # the export return new protos), and a copy would hold every weight twice.
    model = override_input_shapes(src, settings.shapes) if settings.shapes else src
    shaped = model  # the input as --shapes made it, before any rule prepares it
    model, narrowed, dtype_changes = narrow_float64(model)  # TensorRT computes no float64: said, not silent
    large = weight_bytes(model) > settings.large_model_bytes  # lazy (on-disk) weights count too
    opset_before, nodes_before = default_opset(model), _count_nodes(model)
    was_sorted = is_sorted(model)
    notes = _subgraph_notes(model)
    active = _active(rules, settings)
    if settings.rules_only and not settings.shapes and not narrowed.count and _nothing_applies(model, active):
        return _untouched(model, settings, nodes_before, tuple(notes), dtype_changes)
    for rule in active:
        model = rule.prepare(model, settings, large)
    # Imported with inferred shapes: graphsurgeon folds Shape nodes only where shapes are known.
    stub = inferred(model, large)  # structure and shapes, no weight bytes
    graph = import_with_shapes(model, stub)
    graph.toposort()  # rules below walk producers before consumers
    results: list[cleanup.CleanupResult] = [narrowed] if narrowed.count else []
    if settings.remove_dead_nodes:  # before folding, which would otherwise sweep them up uncounted
        results.append(cleanup.remove_dead(graph))
    shapes = value_shapes(stub)
    # Fold first: exporters compute offsets' shapes with Shape/Slice chains, and only
    # folded graphs give the DCN rules (and their proofs) concrete shapes.
    if settings.fold_constants:
        if large:
            results.append(cleanup.CleanupResult("fold-constants", 0, notes=("skipped: model over the large-model "
                                                                             "threshold",)))
        else:
            computing = _computing_nodes(graph)
            load_foldable(graph)  # weights left on disk that folding evaluates (ONNX Runtime reads no absolute path)
            results.append(cleanup.fold_constants(graph, settings.fold_size_limit))
            if _computing_nodes(graph) != computing:  # more than Constant nodes lowered: shapes may be new
                shapes = value_shapes(inferred(export(graph, model, with_weights=False), large))
    ctx = RuleContext(graph, graph.tensors(), shapes, settings, opset_before,
                      frozenset(t.name for t in graph.outputs))
    applied = _apply_rules(graph, ctx, active, frozenset(a.node for a in aside if a.node))

    if settings.remove_dead_nodes:
        graph.cleanup(remove_unused_graph_inputs=False)  # what the rewrites left unused (old weights)
    if settings.int64_to_int32:
        results.append(cleanup.int64_to_int32(graph))
    results.append(cleanup.toposort(graph, was_sorted))

    kept = kept_weights(graph)  # before the export: what the graph proof need not look at
    out = export(graph, model)
    notes += _weights_no_longer_inputs(model, out)
    strip_value_info(out)
    results.append(cleanup.rename_shared_dims(out))
    if applied.pending:  # the newest opset any replacement needs serves them all
        need = max(applied.pending)
        out, converted = cleanup.finish_pending(out, need, "/".join(sorted(applied.pending[need])), large)
        if converted is not None:
            results.append(converted)
        strip_value_info(out)  # the opset converter's inferred shapes stop at pending nodes: partial
    if settings.prune_opsets:
        results.append(cleanup.prune_opsets(out))

    before = shaped if narrowed.count else model  # a narrowed model is proven against the float64 one
    try:
        if not large:  # even with proofs off: never hand back a model ONNX Runtime cannot load
            _refuse_unloadable(out, shaped, settings.shapes, proven=settings.verify)
        gproof = _graph_proof(before, out, settings, applied, kept, large=large, narrowed=bool(narrowed.count),
                              lengths=length_inputs(src))  # before --shapes named no dims
    except AccuracyError as exc:
        if settings.step_aside:
            raise _GraphFailed(exc, tuple(SteppedAside(e.node, e.before.op, e.rule, "the whole-graph proof failed with "
                                                       f"it: {exc.message}") for e in applied.entries)) from None
        raise
    drift = None
    if applied.inexact and settings.verify and not large:
        drift = measure_drift(before if was_sorted else sorted_copy(before), out,
                              {**settings.proof_shapes, **settings.shapes}, settings.seed)
    report = RewriteReport(settings, tuple(applied.entries), tuple(results), gproof, nodes_before,
                           _count_nodes(out), opset_before, default_opset(out), tuple(notes + applied.notes), drift, dtype_changes)
    return RewriteResult(out, report)


def _active(rules: Sequence[RewriteRule] | None, settings: RewriteSettings) -> tuple[RewriteRule, ...]:
    """The rules to apply: ``rules`` (default: the plugin map's, then the catalog's), those of other targets left out."""
    active = tuple(rules) if rules is not None else active_rules(settings.plugin_map, settings.skip_rules)
    return tuple(r for r in active if not r.targets or settings.target in r.targets)


def _nothing_applies(model: onnx.ModelProto, rules: tuple[RewriteRule, ...]) -> bool:
    """Whether no main-graph node may be a rule's site (the rules' own cheap look, on the proto)."""
    opset = default_opset(model)
    facts = ModelFacts.of(model.graph)
    for node in model.graph.node:
        rule = rule_among(rules, node.domain, node.op_type, opset)
        if rule is not None and rule.may_apply(node, facts):
            return False
    return True


def _untouched(model: onnx.ModelProto, settings: RewriteSettings, nodes: int, notes: tuple[str, ...],
               dtype_changes: tuple[DtypeChange, ...]) -> RewriteResult:
    """``rules_only`` and no node any rule may apply to: the model as it came (no import, no clean-up,
    no export), and nothing to prove: not one node or weight changed. Inputs whose dims share a name
    (TensorRT would take them as one) get their own names, on a copy: the one edit a build needs."""
    results: tuple[cleanup.CleanupResult, ...] = ()
    if cleanup.shares_dims(model):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model, results = copy, (cleanup.rename_shared_dims(copy),)
    proof = Proof("identical", True, arithmetic=arithmetic(model),
                  reason="nothing to rewrite: no rule applies to any node, and the model "
                  "goes on as it is (no clean-up but dim names, no graph round trip)")
    opset = default_opset(model)
    report = RewriteReport(settings, (), results, proof, nodes, nodes, opset, opset, notes, None, dtype_changes)
    return RewriteResult(model, report)


def _graph_proof(before: onnx.ModelProto, out: onnx.ModelProto, settings: RewriteSettings, applied: _Applied,
                 kept: Mapping[str, onnx.TensorProto], *, large: bool, narrowed: bool,
                 lengths: Mapping[str, str] | None = None) -> Proof:
    """The graph before and after, where the change can reach (``kept``: the weights exported
    untouched); AccuracyError when the outputs moved."""
    unchanged = prove_unchanged(before, out) if settings.verify else None
    if unchanged is not None:
        return unchanged  # nothing to run: both graphs compute the same thing by construction
    if not settings.verify or large:
        return Proof("none", True, reason="--no-verify" if not settings.verify else
                     "model over the large-model threshold: graph proof skipped (node proofs still ran)")
    # cut only where ONNX Runtime cannot run a node: a rewritten DeformConv is compared end to end
    tolerance = max(settings.graph_tolerance, settings.node_tolerance) if narrowed or applied.reorders_sums else \
        settings.graph_tolerance  # float32 against float64, or sums reordered: float32's rounding, not 1e-6
    # the shapes the build will run (its first profile's opt) stand in for dynamic dims the model leaves open
    gproof = prove_graph(before, out, {**settings.proof_shapes, **settings.shapes}, applied.graph_cuts, settings.seed,
                         tolerance, kept, lengths)
    if not gproof.passed:
        bad = [f"{s.name}: max abs {s.max_abs:.3g} > {gproof.tolerance or 0:.3g} ({gproof.arithmetic} tolerance)"
               for s in gproof.stats if s.max_abs > (gproof.tolerance or 0)]
        what = "; ".join(bad) or gproof.reason or ""
        raise AccuracyError(what if what.startswith("the rewritten model does not load") else
                            "rewrite changed the model's outputs: " + what,
                            hint="nothing was written; retry with --no-fold or --no-int32 and report the model")
    return gproof


def _refuse_unloadable(out: onnx.ModelProto, shaped: onnx.ModelProto, shapes: Mapping[str, Shape], *,
                      proven: bool) -> None:
    """A rewritten model of standard ops that ONNX Runtime refuses to load is never returned.
    When the input model with ``--shapes`` applied is refused too, the shapes are the cause:
    with its optimizer on (as a user loads a model), ONNX Runtime type-checks every If/Loop
    branch at the static shapes, even a branch these shapes never take.

    Only graphs with subgraphs get the optimizing load (its fusions copy weights: too much
    memory to spend on every model); others get the plain load, which the graph proof
    (``proven``) makes anyway: of every node the rewrite changed (the others are the original's
    own nodes on the original's types), or of the whole graph where it cannot isolate them."""

    graphs = list(iter_graphs(out.graph))
    if any(normalize_domain(n.domain) not in ORT_DOMAINS for g in graphs for n in g.node):
        return  # plugin nodes: no ONNX Runtime loads them; the node proofs stand in
    if len(graphs) == 1 and proven:
        return  # the graph proof loads what changed, and says "does not load" if it cannot
    try:
        ort.session(out, optimize=len(graphs) > 1, refuse_too_big=False)
        return
    except InvalidModelError as exc:
        reason = exc.message.removeprefix("ONNX Runtime cannot load the model: ")
    if shapes:
        try:
            ort.session(shaped, optimize=True, refuse_too_big=False)
        except InvalidModelError as exc:
            given = ",".join(f"{k}:{'x'.join(map(str, v))}" for k, v in shapes.items())
            raise UsageError(
                f"with --shapes {given} the model does not load in ONNX Runtime: "
                + exc.message.removeprefix("ONNX Runtime cannot load the model: "),
                hint="nothing was written; ONNX Runtime checks every If branch at static shapes, and a branch "
                     "cannot take these (one the inputs may never reach): leave that input dynamic (drop it "
                     "from --shapes)",
            ) from None
    raise AccuracyError(f"the rewritten model does not load in ONNX Runtime: {reason}",
                        hint="nothing was written; retry with --no-fold or --no-int32 and report the model")
