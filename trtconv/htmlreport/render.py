"""The report page, from the JSON documents the commands already produce. Pure: data in, HTML out.

Sections appear when their data exists: per-node verdicts and dynamic inputs (check), rewrites with their proof
figures, the nodes kept out of FP16/INT8 with the reason, the accuracy gate per output (with
a small SVG of each sample's cosine where samples were measured), the engine's layers by
precision, and the manifest. Nothing is fetched: styles inline, no script, no images.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trtconv.load import dims_text
from trtconv.precision import parts_line

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f4f4f4}.pass{color:#080}.fail{color:#b00;font-weight:bold}
.supported{color:#080}.rewritable,.plugin{color:#a60}.unsupported{color:#b00}
pre{background:#f8f8f8;padding:1em;overflow:auto;max-height:40em}code{font-size:90%}
svg{background:#fafafa;border:1px solid #ddd}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return esc(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], css_id: str = "") -> str:
    """An HTML table; cells are escaped unless given as ``("html", markup)``."""
    def cell(v: Any) -> str:
        return v[1] if isinstance(v, tuple) and len(v) == 2 and v[0] == "html" else _num(v)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    ident = f' id="{esc(css_id)}"' if css_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(css_id: str, title: str, body: str) -> str:
    return f'<section id="{esc(css_id)}"><h2>{esc(title)}</h2>{body}</section>'


def node_verdicts(check: Mapping[str, Any]) -> str:
    nodes = check.get("nodes") or []
    summary = check.get("summary") or {}
    target = check.get("target")
    target = ", ".join(f"{k} {v}" for k, v in target.items()) if isinstance(target, Mapping) else target
    counts = ", ".join(f"{v} {k}" for k, v in summary.items()) if isinstance(summary, Mapping) else summary
    head = f"<p>verdict: <b>{esc(check.get('verdict'))}</b> against {esc(target)}; {esc(counts)}</p>"
    if not nodes:
        return head + "<p>every node is supported as it is.</p>"
    rows = [(n.get("path"), n.get("op_type"), ("html", f'<span class="{esc(n.get("status"))}">{esc(n.get("status"))}'
             "</span>"), n.get("rewrite") or "", "; ".join(str(f.get("message")) for f in n.get("findings") or []))
            for n in nodes]
    return head + table(["node", "op", "status", "rewrite", "reason"], rows, "node-verdicts")


def dynamic_inputs(check: Mapping[str, Any]) -> str:
    """The inputs that need an optimization profile, as ``check`` prints them: dims, and what --shapes gave."""
    rows = [(i.get("name"), dims_text(i.get("dims") or []),
             "x".join(map(str, i["shape"])) if i.get("shape") else ("html", '<span class="fail">not given</span>'))
            for i in check.get("inputs") or [] if i.get("dynamic")]
    return table(["input", "dims", "--shapes"], rows, "dynamic-inputs")


def rewrites(doc: Sequence[Mapping[str, Any]], graph_proof: Mapping[str, Any] | None = None) -> str:
    rows = []
    for r in doc:
        proof = r.get("proof") or {}
        worst = max((o.get("max_abs", 0.0) for o in proof.get("outputs") or []), default=None)
        cos = min((o.get("cosine", 1.0) for o in proof.get("outputs") or []), default=None)
        verdict = "passed" if proof.get("passed") else ("not proven" if proof.get("passed") is None else "FAILED")
        rows.append((r.get("node"), r.get("rule"), r.get("target") or "", proof.get("method"),
                     worst, cos, proof.get("tolerance"), verdict))
    body = table(["node", "rule", "target", "proof", "max abs", "min cosine", "tolerance", "verdict"], rows,
                 "rewrites") if rows else "<p>no node needed rewriting.</p>"
    if graph_proof:
        passed = {True: "yes", False: "no", None: "not judged"}[graph_proof.get("passed")]
        scope = graph_proof.get("scope") or {}
        ran = (f"; both whole graphs ran: {scope.get('why')}" if scope.get("whole_graph") else
               f"; sized by the change: {sum(scope.get('nodes_run') or [])} of {sum(scope.get('nodes') or [])} "
               f"nodes ran, outputs compared: {', '.join(scope.get('outputs_compared') or []) or 'none'}"
               if scope else "")
        body += (f"<p>graph proof: {esc(graph_proof.get('method'))}, passed: {esc(passed)}"
                 f"{'; ' + esc(graph_proof.get('reason')) if graph_proof.get('reason') else ''}{esc(ran)}</p>")
    return body


def stepped_aside(aside: Sequence[Mapping[str, Any]]) -> str:
    """Rewrites dropped because their proof failed: the node stayed as it was (``build``)."""
    return table(["node", "op", "rule", "why it stepped aside"],
                 [(a.get("node") or "(clean-up)", a.get("op") or "", a.get("rule"), a.get("reason")) for a in aside],
                 "stepped-aside")


def parser_disagreements(found: Sequence[Mapping[str, Any]]) -> str:
    """Nodes ``check`` predicted the parser would refuse that the real parser and builder took."""
    return ("<p>check's prediction was advice here: the target's own parser decided, and took these.</p>"
            + table(["node", "op", "check predicted", "the real parser"],
                    [(d.get("node"), d.get("op"), d.get("predicted"), d.get("real")) for d in found],
                    "parser-disagreements"))


def kept_out(kept: Sequence[Mapping[str, Any]]) -> str:
    if not kept:
        return "<p>no node was kept out of the reduced precision.</p>"
    return table(["node", "op", "kept in", "why"], [(k.get("node"), k.get("op"), k.get("precision"), k.get("why"))
                                                   for k in kept], "kept-out")


def kept_nodes(precision: str | None, report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Nodes kept out of FP16/INT8 and why, from a quantize/precision report (fp16 or int8 schema)."""
    out = []
    if precision == "fp16":
        for k in report.get("kept") or []:
            out.append({"node": k.get("name"), "op": k.get("op_type"), "precision": "fp32",
                        "why": f"FP16 rule {k.get('rule')}: {k.get('detail')}"})
        return out
    remainder = report.get("remainder") or "fp32"
    for s in report.get("skipped") or []:
        out.append({"node": s.get("node"), "op": s.get("op_type"), "precision": remainder,
                    "why": f"not quantized: {s.get('reason')}"})
    for node in report.get("auto_excluded") or []:
        out.append({"node": node, "op": "", "precision": remainder, "why": "excluded from INT8 by the accuracy gate"})
    for k in (report.get("fp16_remainder") or {}).get("kept") or []:
        out.append({"node": k.get("name"), "op": k.get("op_type"), "precision": "fp32",
                    "why": f"FP16 remainder rule {k.get('rule')}: {k.get('detail')}"})
    return out


def cosine_svg(name: str, values: Sequence[float], limit: float | None, width: int = 320, height: int = 90) -> str:
    """Each sample's cosine as dots on a line, with the gate's limit dashed (inline SVG)."""
    lo = min([*values, limit if limit is not None else 1.0, 0.99])
    lo = max(min(lo, 1.0) - 0.001, -1.0)
    span = (1.0 - lo) or 1.0
    def y(v: float) -> float:
        return round(8 + (1.0 - v) / span * (height - 16), 2)
    step = (width - 20) / max(len(values) - 1, 1)
    pts = [(round(10 + i * step, 2), y(v)) for i, v in enumerate(values)]
    line = " ".join(f"{x},{yy}" for x, yy in pts)
    dots = "".join(f'<circle cx="{x}" cy="{yy}" r="3" fill="#36c"><title>sample {i}: {v:.6f}</title></circle>'
                   for i, ((x, yy), v) in enumerate(zip(pts, values)))
    gate = (f'<line x1="0" x2="{width}" y1="{y(limit)}" y2="{y(limit)}" stroke="#b00" stroke-dasharray="4 3"/>'
            if limit is not None and limit >= lo else "")
    return (f'<svg class="cosine-plot" data-output="{esc(name)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="per-sample cosine of {esc(name)}">'
            f'<title>per-sample cosine of {esc(name)} (y from {lo:.4f} to 1)</title>{gate}'
            f'<polyline points="{line}" fill="none" stroke="#9bd"/>{dots}</svg>')


def samples_parts(parts: Mapping[str, int], refused: bool) -> str:
    """INT8's samples per part, in the text report's words."""
    return f"<p>samples: {esc(parts_line(parts, refused))}</p>"


def accuracy_gate(gate: Mapping[str, Any]) -> str:
    limits = gate.get("thresholds") or {}
    per_output = limits.get("per_output") or {}
    bad = " ".join(gate.get("violations") or [])
    rows = []
    for s in gate.get("accuracy") or []:
        name = str(s.get("name"))
        limit = (per_output.get(name) or {}).get("min_cosine", limits.get("min_cosine"))
        failed = name in bad
        plot = s.get("per_sample_cosine") or []
        rows.append((name, s.get("shape"), s.get("cosine"), limit, s.get("max_abs"), s.get("top1_agreement"),
                     ("html", f'<span class="{"fail" if failed else "pass"}">{"fail" if failed else "pass"}</span>'),
                     ("html", cosine_svg(name, plot, limit) if plot else "no per-sample figures")))
    checked = gate.get("accuracy_check") or ("checked" if gate.get("checked") else "not checked")
    passed = {True: "yes", False: "no", None: "not judged (not gated)"}[gate.get("passed")]
    head = f"<p>checked on: {esc(checked)}; passed: <b>{esc(passed)}</b></p>"
    if gate.get("verdict"):  # INT8: the claim a pass makes, or "unverified" and why
        cls = "fail" if gate.get("unverified") else "pass" if gate.get("passed") else ""
        head += f'<p class="verdict">verdict: <b class="{cls}">{esc(gate.get("verdict"))}</b></p>'
    viol = "".join(f"<li>{esc(v)}</li>" for v in gate.get("violations") or [])
    by_error = [str(s.get("name")) for s in gate.get("accuracy") or [] if s.get("measure", "cosine") != "cosine"]
    note = (f'<p class="measure">one value per sample: {esc(", ".join(by_error))}: its "cosine" is 1/sqrt(1 + e²), '
            "e its error over the RMS of its FP32 values</p>") if by_error else ""
    return head + table(["output", "shape", "cosine", "min cosine", "max abs", "top-1", "verdict",
                         "per-sample cosine"], rows, "accuracy-gate") + note + (f"<ul>{viol}</ul>" if viol else "")


def layer_precisions(rows: Sequence[Mapping[str, Any]], source: str, off: Sequence[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        if r.get("compute"):
            name = str(r.get("precision") or "no float tensor")  # integer/bool only: shape arithmetic (as inspect says)
            counts[name] = counts.get(name, 0) + 1
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    body = f"<p>{len(rows)} layers ({esc(source)}); compute layers by precision: {esc(summary)}</p>"
    if off:
        body += "<h3>not in the requested precision</h3>" + table(
            ["layer", "type", "precision", "reason"], [(o.get("name"), o.get("type"), o.get("precision"),
                                                      o.get("reason") or "") for o in off], "off-precision")
    return body + "<details><summary>every layer</summary>" + table(
        ["layer", "type", "precision", "inputs", "outputs"],
        [(r.get("name"), r.get("type"), r.get("precision") or "-",
          ", ".join(f"{t.get('name')}:{t.get('dtype')}" for t in r.get("inputs") or []),
          ", ".join(f"{t.get('name')}:{t.get('dtype')}" for t in r.get("outputs") or [])) for r in rows],
        "engine-layers") + "</details>"


def verification(doc: Mapping[str, Any]) -> str:
    """A build's verification: the engine run or not (and why), what ONNX Runtime verified, what was only measured."""
    css = "pass" if doc.get("engine_verified") else ("fail" if doc.get("engine_run") else "not-run")
    body = f'<p id="engine-run" class="{css}">{esc(doc.get("engine"))}</p>'
    for title, items in (("verified", doc.get("verified") or []), ("not verified", doc.get("not_verified") or [])):
        if items:
            body += f"<p>{esc(title)}:</p><ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"
    return body


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """The whole document. The Content-Security-Policy forbids every fetch: the page stands alone."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1><p id=\"subtitle\">{esc(subtitle)}</p>" + "".join(sections) + "</body></html>\n")


def manifest_block(manifest: Mapping[str, Any]) -> str:
    slim = {k: v for k, v in manifest.items() if k not in ("layers",)}
    return f'<pre id="manifest">{esc(json.dumps(slim, indent=2, sort_keys=True, default=str))}</pre>'
