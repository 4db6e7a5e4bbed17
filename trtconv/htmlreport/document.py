"""Assemble the report page from what a command recorded (its JSON documents, by kind)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trtconv.htmlreport.render import (
    accuracy_gate,
    dynamic_inputs,
    kept_nodes,
    kept_out,
    layer_precisions,
    manifest_block,
    node_verdicts,
    page,
    parser_disagreements,
    rewrites,
    samples_parts,
    section,
    stepped_aside,
    verification,
)


def _gate_sections(gate: Mapping[str, Any]) -> list[str]:
    precision = gate.get("precision")
    report = gate.get("int8") if precision == "int8" else gate.get("fp16")
    out = [section("kept-out-section", f"Nodes kept out of {str(precision).upper()}",
                   kept_out(kept_nodes(precision, report or {})))]
    parts = gate.get("samples_per_part") if precision == "int8" else None
    if parts:  # INT8's parts; at exit 8 the judging part was set aside and never judged
        out.append(section("samples-section", "Samples per part", samples_parts(
            parts, bool(gate.get("error")) and not gate.get("held_out_samples"))))
    if gate.get("accuracy"):
        out.append(section("accuracy-section", "Accuracy gate per output", accuracy_gate(gate)))
    return out


def report_html(command: str, model: str, docs: Mapping[str, Any], *, status: str,
                layers: tuple[Sequence[Mapping[str, Any]], str, Sequence[Mapping[str, Any]]] | None = None) -> str:
    """The page for ``trtconv <command> MODEL``. ``docs``: ``check`` (check --json), ``rewrite``
    (rewrite --json), ``gate`` (quantize --json, or a build's precision gate), ``manifest``,
    ``verification`` (a build's: whether the engine ran, what ONNX Runtime verified);
    ``layers``: (layer rows, where they come from, layers off the requested precision)."""
    sections = []
    if docs.get("verification") is not None:
        sections.append(section("verification-section", "What was verified, and how", verification(docs["verification"])))
    if docs.get("check") is not None:
        sections.append(section("nodes-section", "Per-node verdicts", node_verdicts(docs["check"])))
        if any(i.get("dynamic") for i in docs["check"].get("inputs") or []):
            sections.append(section("inputs-section", "Dynamic inputs (need an optimization profile)",
                                    dynamic_inputs(docs["check"])))
    if docs.get("rewrite") is not None:
        doc = docs["rewrite"]
        sections.append(section("rewrites-section", "Rewrites and their proofs",
                                rewrites(doc.get("rewrites") or [], doc.get("graph_proof"))))
    elif docs.get("manifest") is not None:
        sections.append(section("rewrites-section", "Rewrites and their proofs",
                                rewrites(docs["manifest"].get("rewrites") or [])))
    manifest = docs.get("manifest") or {}
    if manifest.get("rewrites_stepped_aside"):
        sections.append(section("stepped-aside-section", "Rewrites that stepped aside",
                                stepped_aside(manifest["rewrites_stepped_aside"])))
    if manifest.get("parser_disagreements"):
        sections.append(section("disagreements-section", "Where the real parser overruled check",
                                parser_disagreements(manifest["parser_disagreements"])))
    if docs.get("gate") is not None:
        sections += _gate_sections(docs["gate"])
    if layers is not None:
        rows, source, off = layers
        sections.append(section("layers-section", "Engine layers by precision", layer_precisions(rows, source, off)))
    if docs.get("manifest") is not None:
        sections.append(section("manifest-section", "Manifest", manifest_block(docs["manifest"])))
    return page(f"trtconv {command}: {model}", status, sections)
