"""Layer rows and the layers that did not get the precision asked for, with trtconv's reason.

Pure functions over the layer table (inspector JSON schema) and the manifest's precision
section. A TensorRT layer is matched to the ONNX node it came from by name: the ONNX parser
names a layer after its node (``node``, or ``node`` plus a suffix when one node becomes
several layers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from trtconv.plan import FLOAT_TYPES, MAC_LAYERS, NON_COMPUTE, REDUCED, layer_dtype, tensor_dtype


def _tensor(t: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.get("Name"), "dtype": tensor_dtype(dict(t))}
    for key in ("Dimensions", "Shape"):
        if key in t:
            out["shape"] = t[key]
    return out


def layer_rows(layers: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per layer: name, type, precision (narrowest float type it touches; None for
    integer-only or untyped layers), whether it computes, inputs and outputs with their types."""
    rows = []
    for layer in layers:
        if not isinstance(layer, Mapping):  # LAYER_NAMES_ONLY verbosity: a bare name
            rows.append({"name": str(layer), "type": None, "precision": None, "compute": None,
                         "inputs": [], "outputs": []})
            continue
        kind = str(layer.get("LayerType", ""))
        rows.append({
            "name": str(layer.get("Name", "")),
            "type": kind,
            "precision": layer_dtype(dict(layer)),
            "compute": kind not in NON_COMPUTE,
            "inputs": [_tensor(t) for t in layer.get("Inputs") or [] if isinstance(t, Mapping) and t],
            "outputs": [_tensor(t) for t in layer.get("Outputs") or [] if isinstance(t, Mapping) and t],
        })
    return rows


def intended_precisions(precision: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """ONNX node name -> (precision the precision stage meant for it, why), from the manifest's
    ``precision`` section. Only nodes it decided something about are listed."""
    requested = precision.get("requested")
    report = precision.get("report") or {}
    out: dict[str, tuple[str, str]] = {}
    if requested == "fp16":
        for k in report.get("kept") or []:
            out[str(k.get("name"))] = ("fp32", f"kept FP32 by FP16 rule {k.get('rule')}: {k.get('detail')}")
        return out
    if requested != "int8":
        return out
    remainder = str(report.get("remainder") or "fp32")
    fp16 = report.get("fp16_remainder") or {}
    kept_rule = {str(k.get("name")): f"FP16 rule {k.get('rule')}: {k.get('detail')}" for k in fp16.get("kept") or []}
    for node, rule in kept_rule.items():
        out[node] = ("fp32", f"INT8 remainder kept FP32 by {rule}")
    for s in report.get("skipped") or []:
        node = str(s.get("node"))
        if node not in out:
            out[node] = (remainder, f"not quantized: {s.get('reason')} (runs in the {remainder} remainder)")
    for node in report.get("auto_excluded") or []:
        out[str(node)] = (remainder, f"excluded from INT8 by the accuracy gate (--auto-exclude); runs in {remainder}")
    for p in report.get("placed") or []:
        node = str(p.get("node"))
        if node in (report.get("auto_excluded") or []):
            continue
        if node in kept_rule:  # quantized inputs, but the node itself computes in FP32: it reads them cast up
            out[node] = ("fp32", f"Q/DQ placed on its inputs, but the INT8 remainder keeps the node in FP32 "
                                 f"({kept_rule[node]}): it reads the dequantized values through a Cast to FP32")
        else:
            out[node] = ("int8", "Q/DQ placed")
    return out


def node_of(layer_name: str, nodes: Mapping[str, Any]) -> str | None:
    """The ONNX node a layer came from: same name, or the name before a parser suffix."""
    if layer_name in nodes:
        return layer_name
    for candidate in re.split(r" \+ |\|\|", layer_name):  # fused layers: "a + b"
        candidate = candidate.strip()
        if candidate in nodes:
            return candidate
        base = re.sub(r"(_\d+|_output|_\w+_\d+)$", "", candidate)
        if base in nodes:
            return base
    return None


def off_precision(rows: Iterable[Mapping[str, Any]], precision: Mapping[str, Any],
                  source: str = "engine") -> list[dict[str, Any]]:
    """Compute layers that did not get the requested precision, each with trtconv's reason where
    it knows one (an FP16 rule, the INT8 gate, a node not quantized), else ``None``.

    A table recorded from the network (``source="network"``) is judged as the precision check
    judges it: on its multiply-accumulate layers only, since the engine fuses the pointwise
    layers around them into them."""
    requested = str(precision.get("requested") or "fp32")
    if requested not in REDUCED:
        return []
    rows = list(rows)
    if source == "network" and any(r.get("type") in MAC_LAYERS for r in rows):
        rows = [r for r in rows if r.get("type") in MAC_LAYERS]
    reduced = REDUCED[requested]
    intended = intended_precisions(precision)
    out = []
    for row in rows:
        got = row.get("precision")
        if not row.get("compute") or got not in FLOAT_TYPES or got in reduced:
            continue
        node = node_of(str(row.get("name")), intended)
        reason = intended[node][1] if node is not None else None
        out.append({"name": row.get("name"), "type": row.get("type"), "precision": got, "node": node,
                    "reason": reason})
    return out
