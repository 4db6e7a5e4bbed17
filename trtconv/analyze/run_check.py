"""``analyze(loaded, target, shapes) -> CheckReport``: the pure function behind ``trtconv check``."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

import onnx

from trtconv.analyze.check_report import (
    BUILDER,
    ERROR,
    PLUGIN,
    REWRITABLE,
    SUPPORTED,
    UNSUPPORTED,
    WARNING,
    CheckReport,
    Finding,
    InputReport,
    NodeReport,
)
from trtconv.analyze.domain_blind import collision_finding
from trtconv.analyze.lookups import GraphIndex, NodeRef, build_index, int64_out_of_range
from trtconv.analyze.rules import CONVERTIBLE, NodeContext, dtype_name, run_rules
from trtconv.analyze.support import SupportTable, load_table
from trtconv.errors import InvalidModelError
from trtconv.load import (
    LoadedModel,
    Shape,
    approx_size,
    infer_shapes,
    input_dims,
    is_stripped,
    override_input_shapes,
    structure_only,
)
from trtconv.onnxutil import DEFAULT_DOMAIN, has_subgraphs, is_default_domain
from trtconv.rewrites import (
    RENAME_SHARED_DIMS,
    SPLIT_FLAG,
    NodeView,
    RewriteRule,
    rewrite_rule_for,
    rule_settling,
    tail_ops,
)

NO_PLUGIN_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview.training")
# Inputs where ONNX exporters write INT64_MAX/MIN to mean "to the end"; the parser clamps them.
SENTINEL_INPUTS = {"Slice": (1, 2, 4)}
CUSTOM_OP = "custom-op"
SHARED_DIMS = "shared-dim-names"
# Ops ONNX Runtime's dynamic quantization writes (quantize_dynamic): no TensorRT importer takes them.
ORT_DYNAMIC_QUANT = {("", "ConvInteger"), ("", "MatMulInteger"), ("", "DynamicQuantizeLinear"),
                     ("com.microsoft", "DynamicQuantizeLSTM"), ("com.microsoft", "DynamicQuantizeMatMul"),
                     ("com.microsoft", "MatMulIntegerToFloat"), ("com.microsoft", "QAttention"),
                     ("com.microsoft", "DynamicQuantizeConvInteger")}
ORT_QUANT_HINT = ("quantized by ONNX Runtime: start from the float model (`trtconv quantize` makes INT8 that "
                  "TensorRT takes)")


WEIGHTS_STRIPPED = 1 << 20  # inline weight bytes from which analysis works on structure_only (what `check` loads)
KEPT_BYTES = 64 << 10  # constants a rule may read (zero points, shapes, flags) keep their values there


def analyze(loaded: LoadedModel, target: str, shapes: Mapping[str, Shape] | None = None) -> CheckReport:
    """What TensorRT ``target``'s ONNX parser will reject in ``loaded``, node by node.

    Raises InvalidModelError for a structurally broken graph, UsageError for --shapes
    that do not fit the model's inputs.
    """
    table = load_table(target)
    shapes = dict(shapes or {})
    model = loaded.proto
    if approx_size(model) >= WEIGHTS_STRIPPED:  # the build's model, weights in: no weight is serialized for
        model = structure_only(model, KEPT_BYTES)  # shape inference (it copied each 3 times); small constants stay
    if shapes:
        model = override_input_shapes(model, shapes)
    inferred = infer_shapes(loaded, model, symbolic=False)  # on the structure alone; never fails
    index = build_index(inferred)  # raises on broken structure (dangling input, cycle, duplicate)
    if loaded.checker_error:
        _attribute_checker_error(inferred, index)

    reports: list[NodeReport] = []
    counts: Counter[str] = Counter()
    int64_wide = _wide_int64(index)
    split = _split_hint(loaded, target)
    for ref in index.nodes:
        report = _node_report(ref, table, index, int64_wide, split)
        if report is None:
            counts[SUPPORTED] += 1
        else:
            counts[report.status] += 1
            reports.append(report)
    warnings = list(index.warnings)
    model_findings = _io_types(loaded.proto) + _shared_dim_names(loaded.proto, shapes)
    if loaded.checker_error:
        warnings.append(f"onnx.checker: {loaded.checker_error} (every standard node passes its schema check, "
                        "so this is left as a note: custom or unregistered ops, or graph-level metadata)")
    return CheckReport(
        model=str(loaded.path),
        target=table.version,
        node_count=len(index.nodes),
        counts=dict(counts),
        nodes=tuple(reports),
        inputs=_inputs(loaded.proto, shapes),
        warnings=tuple(warnings),
        checker_error=loaded.checker_error,
        findings=tuple(model_findings),
        model_rewrites=((SHARED_DIMS, RENAME_SHARED_DIMS),) if model_findings else (),
    )


def _io_types(model: onnx.ModelProto) -> list[Finding]:
    """Network inputs/outputs TensorRT cannot represent: sequences, optionals, maps, and element
    types its parser does not convert (UINT16/32/64, INT16, FP8 E5M2, STRING, ...)."""
    out = []
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        inits = {t.name for t in model.graph.initializer}
        for vi in values:
            if vi.name in inits:
                continue
            which = vi.type.WhichOneof("value")
            if which is not None and which != "tensor_type":
                out.append(Finding("io-type", ERROR, f"{kind} {vi.name!r} is a {which.replace('_type', '')}: "
                                                     "TensorRT networks take tensors only"))
            elif which == "tensor_type" and vi.type.tensor_type.elem_type not in CONVERTIBLE:
                out.append(Finding("io-type", ERROR, f"{kind} {vi.name!r} has dtype "
                                                     f"{dtype_name(vi.type.tensor_type.elem_type)}, which TensorRT "
                                                     "has no type for"))
    return out


def _shared_dim_names(model: onnx.ModelProto, shapes: Mapping[str, Shape]) -> list[Finding]:
    """Inputs whose dims share a dim_param name: TensorRT treats equally named dims as equal, so a
    profile giving them different sizes fails the build (PP-OCR cls: H and W are both '?')."""
    out = []
    for name, dims in input_dims(model).items():
        where: dict[str, list[int]] = {}
        for i, d in enumerate(dims):
            if isinstance(d, str) and d:
                where.setdefault(d, []).append(i)
        for sym, axes in where.items():
            if len(axes) < 2:
                continue
            given = shapes.get(name)
            sizes = [given[i] for i in axes] if given is not None and len(given) == len(dims) else None
            hint = (f"`trtconv rewrite` gives each dim its own name ({RENAME_SHARED_DIMS}); "
                    "TensorRT treats equally named dims as one")
            if sizes is not None and len(set(sizes)) > 1:
                out.append(Finding(SHARED_DIMS, ERROR, f"input {name!r}: dims {axes} share the name {sym!r}, but "
                                                       f"--shapes gives them {sizes}: TensorRT requires equally named "
                                                       "dims to be equal, so the build fails", hint, BUILDER))
            elif sizes is None:
                out.append(Finding(SHARED_DIMS, WARNING, f"input {name!r}: dims {axes} share the name {sym!r}: "
                                                         "TensorRT requires them to be equal in every profile", hint,
                                   BUILDER))
    return out


def _attribute_checker_error(model: onnx.ModelProto, index: GraphIndex) -> None:
    """Find the standard-op node that fails its schema; custom/unregistered ops fail legitimately."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for ref in index.nodes:
        node = ref.node
        domain = node.domain or ""
        if not is_default_domain(domain) or not onnx.defs.has(node.op_type, domain):
            continue
        if has_subgraphs(node):
            continue  # its body's nodes are checked one by one
        if any(a.type == onnx.AttributeProto.TENSOR and is_stripped(a.t) for a in node.attribute):
            continue  # a Constant whose (size-validated) bytes check did not load
        try:
            onnx.checker.check_node(node, ctx)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "fails its schema"
            raise InvalidModelError(
                f"invalid node {ref.path!r} ({node.op_type}): {first}",
                hint="the node does not match the ONNX operator schema; re-export the model",
            ) from exc


def _wide_int64(index: GraphIndex) -> dict[str, int]:
    out = {}
    for name, t in index.tensors.items():
        if t.data_type == onnx.TensorProto.INT64:
            v = int64_out_of_range(t)
            if v is not None:
                out[name] = v
    return out


def _split_hint(loaded: LoadedModel, target: str) -> tuple[tuple[str, ...], str]:
    """The ops ``build --split-tail`` moves to ONNX Runtime on ``target``, and the command that does it."""
    path = loaded.path
    engine = path.with_name(path.stem + ".engine")
    return tail_ops(target), (f"`trtconv build {shlex.quote(str(path))} -o {shlex.quote(str(engine))} --trt {target} "
                              f"{SPLIT_FLAG}` builds the graph before it and writes the rest as an ONNX tail for "
                              "ONNX Runtime beside the engine")


def _node_report(ref: NodeRef, table: SupportTable, index: GraphIndex, int64_wide: dict[str, int],
                 split: tuple[tuple[str, ...], str] = ((), "")) -> NodeReport | None:
    """The node's report, or None when it has no findings (the common case, kept cheap)."""
    node = ref.node
    domain = node.domain
    op_type = node.op_type
    row = table.lookup(domain, op_type)
    findings: list[Finding] = []
    opset = ref.opset
    blind = None
    if row is None and domain not in NO_PLUGIN_DOMAINS and op_type in table.ops:
        # The parser picks built-in importers by op type alone (trt-facts §2.3), with the default opset.
        blind = collision_finding(domain, op_type)  # a known different op of that name: an error, not a warning
        if blind is not None:
            findings.append(blind)
        else:
            row = table.ops[op_type]
            opset = index.opsets.get(DEFAULT_DOMAIN, opset)
            findings.append(Finding("domain-ignored", WARNING, f"domain {domain!r} is ignored: the parser imports "
                                                               f"this node as the ONNX operator {op_type}",
                                    "check that the custom op has the ONNX operator's semantics, or rename it"))
    if row is None:
        if blind is None:
            findings.append(_unknown_op(node, domain, table))
    elif row.status == "unsupported":
        findings.append(Finding("op-unsupported", ERROR, f"{op_type} is not supported by the TensorRT "
                                                         f"{table.version} ONNX parser"))
    elif row.status == "removed-plugin":
        findings.append(Finding("plugin-removed", ERROR, f"plugin {op_type} is not in TensorRT "
                                                         f"{table.version}'s libnvinfer_plugin", row.restrictions))
    elif row.status == "deprecated-plugin":
        findings.append(Finding("plugin-deprecated", WARNING, f"plugin {op_type} is deprecated",
                                row.restrictions))
    if row is not None and row.status != "unsupported":
        findings.extend(run_rules(NodeContext(node, ref.path, opset, row, index)))
    if int64_wide:
        skip = SENTINEL_INPUTS.get(op_type, ())
        for i, name in enumerate(node.input):
            if name in int64_wide and i not in skip:
                findings.append(Finding("int64-range", WARNING, f"input {i} {name!r} holds INT64 value "
                                                                f"{int64_wide[name]} outside the INT32 range; "
                                                                "it is clamped wherever TensorRT narrows it to INT32"))
    if not findings:
        return None
    covering = _rule_for(node, index, index.opsets.get(DEFAULT_DOMAIN, ref.opset), findings)
    findings.sort(key=lambda f: f.severity != ERROR)  # errors first; stable otherwise
    errors = [(f.rule, f.message) for f in findings if f.severity == ERROR]
    rule = covering or rule_settling(node, errors, index.producer)
    status = _status(rule, findings)
    findings = _better_hints(domain, op_type, rule if status == REWRITABLE else None, findings, table.version)
    if status == UNSUPPORTED and op_type in split[0] and is_default_domain(domain):
        findings = [replace(f, hint=split[1]) if f.severity == ERROR else f for f in findings]
    return NodeReport(ref.path, op_type, domain, status, tuple(findings),
                      rule.name if rule is not None and errors else None, row.source if row else "")


def _rule_for(node: onnx.NodeProto, index: GraphIndex, opset: int, findings: list[Finding]) -> RewriteRule | None:
    """The built-in rule that rewrites this node at the model's opset; None when there is none,
    or when the rule refuses this node's form (then a finding says why)."""
    rule = rewrite_rule_for(node.domain, node.op_type, opset)
    if rule is None or not any(f.severity == ERROR for f in findings):
        return rule
    reason = rule.refusal(_node_view(node, index, opset))
    if reason is None:
        return rule
    findings.append(Finding("rewrite-declined", ERROR, f"rule {rule.name} cannot rewrite it: {reason}",
                            "see docs/rewrite.md for the forms each rule takes"))
    return None


def _node_view(node: onnx.NodeProto, index: GraphIndex, opset: int) -> NodeView:
    """What a rule reads to refuse a node: its inputs' known shapes, its outputs something reads."""
    shapes: dict[str, list[int | str]] = {}
    for name in node.input:
        if name in index.tensors:
            shapes[name] = [int(d) for d in index.tensors[name].dims]
        elif name in index.shapes:
            shapes[name] = [int(d.dim_value) if d.HasField("dim_value") else d.dim_param for d in index.shapes[name].dim]
    view = NodeView.of_proto(node, opset)
    outputs = tuple(o if o in index.consumed else "" for o in node.output)
    return replace(view, outputs=outputs, shapes=shapes, partial=True)


def _better_hints(domain: str, op_type: str, rule: RewriteRule | None, findings: list[Finding],
                  target: str) -> list[Finding]:
    """Hints that point the right way: a rewritable node gets the rewrite (a rule made for some targets only:
    ``rewrite --trt TARGET``, as ``rewrite`` alone applies only the rules for every target, or ``build``); ONNX
    Runtime's dynamically quantized ops get 'start from the float model' (no plugin or rewrite helps them)."""
    key = ("" if is_default_domain(domain) else domain, op_type)
    if rule is not None and rule.targets:
        hint = (f"`trtconv rewrite --trt {target}` rewrites it, as `trtconv build --trt {target}` does ({rule.name}: "
                f"{rule.description}; a rule for {', '.join(rule.targets)} only, which `trtconv rewrite` without "
                "--trt does not apply)")
    elif rule is not None:
        hint = f"`trtconv rewrite` rewrites it ({rule.name}: {rule.description})"
    elif key in ORT_DYNAMIC_QUANT:
        hint = ORT_QUANT_HINT
    else:
        return findings
    return [replace(f, hint=hint) if f.severity == ERROR else f for f in findings]


def _unknown_op(node: onnx.NodeProto, domain: str, table: SupportTable) -> Finding:
    if is_default_domain(domain) and onnx.defs.has(node.op_type):
        return Finding("op-unsupported", ERROR, f"{node.op_type} is not in the TensorRT {table.version} ONNX "
                                                "parser's operator table")
    if domain in NO_PLUGIN_DOMAINS:
        return Finding("op-unsupported", ERROR, f"{domain} operator {node.op_type} is not supported by TensorRT")
    where = f"domain {domain!r}" if domain else "the default domain, but not an ONNX operator"
    if not table.loads_plugins:  # TensorRT-RTX: a plugin of that name cannot exist
        return Finding("op-unsupported", ERROR, f"custom op {node.op_type} ({where}): no built-in importer, and "
                                                f"{table.product} loads no plugins",
                       "rewrite it into standard ONNX operators")
    return Finding(CUSTOM_OP, ERROR, f"custom op {node.op_type} ({where}): no built-in importer",
                   "the parser looks for a plugin of that name: supply its library (--plugins)")


def _status(rule: RewriteRule | None, findings: list[Finding]) -> str:
    errors = [f for f in findings if f.severity == ERROR]
    if not errors:
        return SUPPORTED
    if rule is not None:
        return REWRITABLE
    if all(f.rule == CUSTOM_OP for f in errors):
        return PLUGIN
    return UNSUPPORTED


def _inputs(original: onnx.ModelProto, shapes: Mapping[str, Shape]) -> tuple[InputReport, ...]:
    dtypes = {vi.name: vi.type.tensor_type.elem_type for vi in original.graph.input}
    out = []
    for name, dims in input_dims(original).items():
        dynamic = any(not isinstance(d, int) for d in dims)
        out.append(InputReport(name, dtype_name(dtypes.get(name, 0)), tuple(dims), dynamic,
                               tuple(shapes[name]) if name in shapes else None))
    return tuple(out)
