"""``--plugin-map map.yaml``: a declarative op → TensorRT plugin node mapping.

Format (documented with an example in docs/rewrite.md)::

    version: 1
    ops:
      - op_type: MyNMS            # required
        domain: custom            # optional, "" (default domain) when absent
        plugin: {name: EfficientNMS_TRT, version: "1", namespace: ""}
        node_domain: trt.plugins  # optional: domain of the emitted node
        inputs: [0, 1]            # optional: plugin input i reads source input inputs[i]
        outputs: [0, 1, 2, 3]     # optional: plugin output i writes source output outputs[i]
        attributes:               # plugin field -> where its value comes from
          score_threshold: {from: score_thr, type: float}
          iou_threshold: {from: iou_thr, type: float, default: 0.5}
          background_class: {value: -1, type: int}

Everything is validated twice before any node is built: the file's structure when it
is read, then every matching node (missing source attribute, wrong type, input index
out of range), so a bad map never leaves a half-rewritten model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.errors import UsageError
from trtconv.onnxutil import normalize_domain
from trtconv.rewrites.documents import read_document
from trtconv.rewrites.emitter import PLUGIN_DOMAIN

TYPES = ("int", "ints", "float", "floats", "string", "strings")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class FieldMap:
    name: str  # plugin field
    type: str
    source: str | None = None  # node attribute to read
    value: Any = None  # fixed value (when source is None)
    default: Any = None  # used when the source attribute is absent


@dataclass(frozen=True)
class OpMap:
    op_type: str
    domain: str
    plugin_name: str
    plugin_version: str
    plugin_namespace: str
    node_domain: str
    inputs: tuple[int, ...] | None
    outputs: tuple[int, ...] | None
    fields: tuple[FieldMap, ...]
    index: int  # position in the file, for messages


@dataclass(frozen=True)
class PluginMap:
    ops: tuple[OpMap, ...]
    source: str = "<memory>"

    def lookup(self, domain: str, op_type: str) -> OpMap | None:
        dom = normalize_domain(domain)
        for op in self.ops:
            if op.op_type == op_type and op.domain == dom:
                return op
        return None


def _err(src: str, where: str, what: str) -> UsageError:
    return UsageError(f"plugin map {src}: {where}: {what}",
                      hint="see docs/rewrite.md, section 'Plugin maps', for the format")


def _str(d: Mapping[str, Any], key: str, src: str, where: str, default: str | None = None) -> str:
    if key not in d or d[key] is None:
        if default is None:
            raise _err(src, f"{where}.{key}", "missing")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise _err(src, f"{where}.{key}", f"must be a string, got {type(v).__name__}")
    return str(v)


def _indices(v: Any, src: str, where: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        raise _err(src, where, "must be a list of non-negative integers (source positions)")
    return tuple(v)


def parse_plugin_map(doc: Any, source: str = "<memory>") -> PluginMap:
    """Check a decoded map document; raise UsageError naming the first wrong field."""
    if not isinstance(doc, dict):
        raise _err(source, "top level", "must be a mapping with 'version' and 'ops'")
    unknown = sorted(set(doc) - {"version", "ops"})
    if unknown:
        raise _err(source, unknown[0], "unknown key (expected 'version' and 'ops')")
    if doc.get("version") != 1:
        raise _err(source, "version", f"must be 1, got {doc.get('version')!r}")
    ops_doc = doc.get("ops")
    if not isinstance(ops_doc, list) or not ops_doc:
        raise _err(source, "ops", "must be a non-empty list")
    ops: list[OpMap] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(ops_doc):
        where = f"ops[{i}]"
        if not isinstance(entry, dict):
            raise _err(source, where, "must be a mapping")
        allowed = {"op_type", "domain", "plugin", "node_domain", "inputs", "outputs", "attributes"}
        extra = sorted(set(entry) - allowed)
        if extra:
            raise _err(source, f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        op_type = _str(entry, "op_type", source, where)
        domain = normalize_domain(_str(entry, "domain", source, where, ""))
        if (domain, op_type) in seen:
            raise _err(source, f"{where}.op_type", f"{domain or 'ai.onnx'}::{op_type} is mapped twice")
        seen.add((domain, op_type))
        plugin = entry.get("plugin")
        if not isinstance(plugin, dict):
            raise _err(source, f"{where}.plugin", "missing (a mapping with name, version, namespace)")
        pextra = sorted(set(plugin) - {"name", "version", "namespace"})
        if pextra:
            raise _err(source, f"{where}.plugin.{pextra[0]}", "unknown key (allowed: name, version, namespace)")
        name = _str(plugin, "name", source, f"{where}.plugin")
        version = _str(plugin, "version", source, f"{where}.plugin")
        namespace = _str(plugin, "namespace", source, f"{where}.plugin", "")
        attrs = entry.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise _err(source, f"{where}.attributes", "must be a mapping of plugin field -> {from|value, type}")
        fields = []
        for fname in sorted(attrs):
            spec = attrs[fname]
            fwhere = f"{where}.attributes.{fname}"
            if fname in ("plugin_version", "plugin_namespace"):
                raise _err(source, fwhere, "set by plugin.version / plugin.namespace, not here")
            if not isinstance(spec, dict):
                raise _err(source, fwhere, "must be a mapping with 'type' and 'from' or 'value'")
            fextra = sorted(set(spec) - {"from", "value", "type", "default"})
            if fextra:
                raise _err(source, f"{fwhere}.{fextra[0]}", "unknown key (allowed: from, value, type, default)")
            ftype = spec.get("type")
            if ftype not in TYPES:
                raise _err(source, f"{fwhere}.type", f"must be one of {', '.join(TYPES)}, got {ftype!r}")
            if ("from" in spec) == ("value" in spec):
                raise _err(source, fwhere, "give exactly one of 'from' (a node attribute) or 'value'")
            fm = FieldMap(fname, ftype, str(spec["from"]) if "from" in spec else None, spec.get("value"),
                          spec.get("default"))
            if fm.source is None:
                convert(fm.value, ftype, f"{source}: {fwhere}.value")
            elif fm.default is not None:
                convert(fm.default, ftype, f"{source}: {fwhere}.default")
            fields.append(fm)
        ops.append(OpMap(
            op_type=op_type, domain=domain, plugin_name=name, plugin_version=version, plugin_namespace=namespace,
            node_domain=_str(entry, "node_domain", source, where, PLUGIN_DOMAIN),
            inputs=_indices(entry.get("inputs"), source, f"{where}.inputs"),
            outputs=_indices(entry.get("outputs"), source, f"{where}.outputs"),
            fields=tuple(fields), index=i,
        ))
    return PluginMap(tuple(ops), source)


def load_plugin_map(path: str | os.PathLike[str]) -> PluginMap:
    return parse_plugin_map(read_document(path, "plugin map"), str(Path(path)))


def convert(value: Any, ftype: str, where: str) -> Any:
    """``value`` as the ONNX attribute TensorRT will read as that plugin field type."""

    def bad(why: str) -> UsageError:
        return UsageError(f"{where}: {why}", hint="see docs/rewrite.md, section 'Plugin maps'")

    def one_int(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, float) and v.is_integer()):
            raise bad(f"{v!r} is not an integer")
        iv = int(v)
        if not INT32_MIN <= iv <= INT32_MAX:
            raise bad(f"{iv} does not fit INT32 (TensorRT reads INT fields as INT32)")
        return iv

    def one_float(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise bad(f"{v!r} is not a number")
        return float(v)

    def one_str(v: Any) -> str:
        if isinstance(v, bytes):
            return v.decode("utf-8")
        if not isinstance(v, str):
            raise bad(f"{v!r} is not a string")
        return v

    many = ftype in ("ints", "floats", "strings")
    base = ftype[:-1] if many else ftype
    fn = {"int": one_int, "float": one_float, "string": one_str}[base]
    if many:
        seq = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
        return [fn(v) for v in seq]
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != 1:
            raise bad(f"expected one {base}, got {len(value)} values")
        value = value[0]
    return fn(value)


@dataclass(frozen=True)
class PlannedPluginNode:
    """A validated replacement: built only after every node in the model has been checked."""

    op: OpMap
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    dropped: tuple[str, ...]


def plan(op: OpMap, node: gs.Node, graph_outputs: frozenset[str] = frozenset()) -> PlannedPluginNode:
    """Check ``node`` against its map entry; every error names the node and the map field."""
    where = f"node {node.name!r} ({op.domain + '::' if op.domain else ''}{op.op_type}): plugin map ops[{op.index}]"
    n_in, n_out = len(node.inputs), len(node.outputs)
    ins = op.inputs if op.inputs is not None else tuple(range(n_in))
    outs = op.outputs if op.outputs is not None else tuple(range(n_out))
    for field_name, idx, n in (("inputs", ins, n_in), ("outputs", outs, n_out)):
        for i in idx:
            if i >= n:
                raise UsageError(f"{where}.{field_name}: index {i} out of range, the node has {n}",
                                 hint="indices are 0-based positions of the source node's tensors")
    for i, t in enumerate(node.outputs):
        if i not in outs and (t.outputs or t.name in graph_outputs):
            raise UsageError(f"{where}.outputs: source output {i} ({t.name!r}) is consumed but not mapped "
                             "to a plugin output")
    attrs = []
    used = set()
    for f in op.fields:
        fwhere = f"{where}.attributes.{f.name}"
        if f.source is None:
            attrs.append((f.name, convert(f.value, f.type, fwhere)))
            continue
        if f.source in node.attrs:
            used.add(f.source)
            attrs.append((f.name, convert(node.attrs[f.source], f.type, f"{fwhere} (from {f.source!r})")))
        elif f.default is not None:
            attrs.append((f.name, convert(f.default, f.type, f"{fwhere}.default")))
        else:
            raise UsageError(f"{fwhere}: the node has no attribute {f.source!r} and no default is given",
                             hint=f"node attributes are: {', '.join(sorted(node.attrs)) or '(none)'}")
    dropped = tuple(sorted(set(node.attrs) - used))
    return PlannedPluginNode(op, ins, outs, tuple(attrs), dropped)


def emit_plugin_node(graph: gs.Graph, name: str, planned: PlannedPluginNode, inputs: Sequence[gs.Tensor],
                     outputs: Sequence[gs.Tensor]) -> gs.Node:
    attrs: dict[str, Any] = dict(planned.attrs)
    attrs["plugin_version"] = planned.op.plugin_version
    attrs["plugin_namespace"] = planned.op.plugin_namespace
    return gs.Node(planned.op.plugin_name, name=f"{name}/plugin", attrs=attrs,
                   inputs=[inputs[i] for i in planned.inputs], outputs=[outputs[i] for i in planned.outputs],
                   domain=planned.op.node_domain)

