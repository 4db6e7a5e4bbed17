"""The precision stage's report as text: shared by ``quantize`` and ``build --precision fp16|int8``.

Both commands gate the same way, so they print the same table, the same verdict and,
for INT8, the same worst layers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from trtconv.api import OutputStats, parts_line, rule_summaries
from trtconv.cli.output import print_json, stdout_console
from trtconv.errors import TrtconvError

SHOW_LAYERS = 10  # sensitivity rows printed (--json lists all)


def emit_quantize(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(doc)
    elif doc["precision"] == "fp16" and doc["fp16"] is not None:
        print_fp16(doc)
    elif doc["int8"] is not None:
        print_int8(doc)


def print_fp16(doc: dict[str, Any]) -> None:
    r = doc["fp16"]
    con = stdout_console()
    con.print(f"{doc['model']} -> {doc['output']} (fp16)", markup=False)
    con.print(f"float nodes: {r['float_nodes']}; converted to FP16: {r['converted']}; kept in FP32: {r['kept_fp32']}; "
              f"casts inserted: {r['casts_inserted']}; BatchNorms folded: {len(r['folded_batchnorms'])}",
              markup=False)
    print_kept(r["kept"])
    if not r["activation_check"]:
        con.print("activation ranges: not measured (no sample data)")
    print_accuracy(doc, r["samples"])
    print_verdict(doc)


def print_fp16_part(label: str, part: dict[str, Any], folded: list[Any], title: str = "kept in FP32, by rule:") -> None:
    """How much of a model (``build``'s FP16 stage) or of INT8's remainder went to FP16, and what stayed FP32 and why."""
    stdout_console().print(f"{label}: {part['converted']} of {part['float_nodes']} float nodes in FP16, "
                           f"{part['kept_fp32']} kept in FP32; BatchNorms folded: {len(folded)}", markup=False)
    print_kept(part["kept"], title)


def print_kept(kept: list[dict[str, str]], title: str = "kept in FP32, by rule:") -> None:
    if not kept:
        return
    con = stdout_console()
    summaries = rule_summaries()
    con.print(title, markup=False)
    groups: dict[str, list[dict[str, str]]] = {}
    for k in kept:
        groups.setdefault(k["rule"], []).append(k)
    for rule, nodes in groups.items():
        con.print(f"  {rule} ({len(nodes)}): {summaries.get(rule, '')}", markup=False)
        for k in nodes[:20]:
            where = "" if k["graph"] == "main" else f" in {k['graph']}"
            con.print(f"    {k['name']} ({k['op_type']}){where}: {k['detail']}", markup=False)
        if len(nodes) > 20:
            con.print(f"    ... and {len(nodes) - 20} more (--json lists all)", markup=False)


def print_int8(doc: dict[str, Any]) -> None:
    r = doc["int8"]
    con = stdout_console()
    con.print(f"{doc['model']} -> {doc['output']} (int8, {r['method']} calibration, {r['remainder']} remainder)",
              markup=False)
    parts = r.get("samples_per_part") or {}
    if parts:  # exit 8 stops before the judgement: nothing judged (held_out_samples 0), the part still said
        con.print("samples: " + parts_line(parts, bool(doc.get("error")) and not doc.get("held_out_samples")),
                  markup=False)
    if r.get("calibration_choice"):
        on = "selection" if parts.get("selection") else "calibration"
        con.print(f"calibration chosen on the {on} samples: {r['chosen_method']} (the worst output's cosine pooled over "
                  "those samples; 'passes': each sample also meets the limit: "
                  + ", ".join(f"{o['method']} {o['worst_cosine']:.4f}" + (" passes" if o["passes"] else "")
                              for o in r["calibration_choice"]) + ")", markup=False)
    sm = r.get("smoothing")
    if sm:
        con.print(f"smoothing (alpha {sm['alpha']}, {sm['layers']} LayerNorms): {'kept' if sm['kept'] else 'not kept'} "
                  f"(worst output cosine {sm['worst_cosine_without']:.6f} without, {sm['worst_cosine_with']:.6f} with)",
                  markup=False)
    bc = r.get("bias_correction")
    if bc:
        con.print(f"bias correction ({bc['layers']} layers): {'kept' if bc['kept'] else 'not kept'} (worst output "
                  f"cosine {bc['worst_cosine_without']:.6f} without, {bc['worst_cosine_with']:.6f} with)", markup=False)
    if r.get("per_tensor_methods"):
        counts: dict[str, int] = {}
        for m in r["per_tensor_methods"].values():
            counts[m] = counts.get(m, 0) + 1
        con.print("per-tensor candidate took: " + ", ".join(f"{m} {n}" for m, n in sorted(
            counts.items(), key=lambda kv: -kv[1])) + " tensors (--json lists each)", markup=False)
    weights = sum(1 for p in r["placed"] if p["kind"] == "weight")
    acts = sum(1 for p in r["placed"] if p["kind"] == "activation")
    con.print(f"Q/DQ placed: {acts} activations, {weights} weights; nodes skipped: {len(r['skipped'])}; "
              f"calibration runs: {r['calibration_runs']}", markup=False)
    cache = r["cache"]
    if cache.get("path"):
        con.print(f"calibration cache {cache['path']}: {'hit' if cache['hit'] else 'miss'} ({cache['reason']})",
                  markup=False)
    reasons: dict[str, int] = {}
    for s in r["skipped"]:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        con.print(f"  skipped ({n}): {reason}", markup=False)
    rem = r.get("fp16_remainder")
    if rem:
        print_fp16_part("FP16 remainder", rem, r["folded_batchnorms"], "  kept in FP32, by rule:")
    if r.get("selection_share"):
        m, n = r["selection_share"]["meeting"], r["selection_share"]["samples"]
        con.print(f"--auto-exclude: no candidate within the INT8 share met the limit on every selection sample; the "
                  f"one judged met it on {m} of {n} (at least the share a pass promises)", markup=False)
    if r["auto_excluded"]:
        con.print(f"--auto-exclude kept {len(r['auto_excluded'])} layer(s) out of INT8 "
                  f"({r['gate_checks']} candidate models checked): {', '.join(r['auto_excluded'])}", markup=False)
    if r.get("sensitivity_sessions"):
        con.print(f"gate cost: {r['gate_evaluations']} full-model evaluations (selection and judging samples) "
                  f"(reference, {r['gate_checks'] + 1} candidate(s) with their FP16 twins, "
                  f"{r['sensitivity_sessions']} sensitivity session(s))", markup=False)
    if r.get("phase_seconds"):
        phases = r["phase_seconds"]
        con.print("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
                  + f"; {sum(phases.values()):.1f} s in all", markup=False)
    print_accuracy(doc, r["accuracy_samples"])
    print_worst(r.get("worst_samples") or [])
    print_sensitivity(r["sensitivity"])
    if doc.get("error") and r.get("int8_share") is not None:
        need = r.get("share_needed_below")
        con.print(f"INT8 share: {r['int8_share']:.0%} of the Conv/ConvTranspose/MatMul/Gemm layers"
                  + (f"; the gate would need at most {need:.0%}" if need is not None else
                     "; the gate needs a lower one"), markup=False)
    print_verdict(doc)


def print_worst(rows: list[dict[str, Any]]) -> None:
    """Each output's worst judged sample: where a pass is closest to failing."""
    if rows:
        stdout_console().print("worst sample per output: " + "; ".join(
            f"{w['output']}: #{w['index']} ({w['sample']}) cosine {w['cosine']:.6f}" for w in rows), markup=False)


def print_sensitivity(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = Table(title="error each quantized layer adds to its own output (selection samples, ONNX Runtime)")
    for col in ("layer", "op", "graph", "rel. sq. error", "cosine", "INT8"):
        table.add_column(col, justify="left" if col in ("layer", "op", "graph") else "right", overflow="fold")
    for e in rows[:SHOW_LAYERS]:
        table.add_row(e["node"], e["op_type"], e["graph"], f"{e['nmse']:.3g}", f"{e['cosine']:.6f}",
                      "excluded" if e.get("excluded") else "yes")
    stdout_console().print(table)
    if len(rows) > SHOW_LAYERS:
        stdout_console().print(f"... and {len(rows) - SHOW_LAYERS} more layers (--json lists all)", markup=False)


def print_accuracy(doc: dict[str, Any], n: int) -> None:
    if not doc["accuracy"]:
        return  # the gate's line says "not checked" and why, once (gate_line)
    con = stdout_console()
    table = Table(title=f"error against FP32 on {n} sample(s) ({doc['accuracy_check']}, ONNX Runtime)")
    stats = [OutputStats(**{**s, "shape": tuple(s["shape"])}) for s in doc["accuracy"]]
    top1 = any(st.top1_agreement is not None for st in stats)
    for col in ("output", "shape", "max abs", "mean abs", "max rel", "cosine", "NaN/Inf") + (("top-1",) if top1 else ()):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right", overflow="fold")
    for st in stats:
        row = [st.name, "x".join(map(str, st.shape)), f"{st.max_abs:.3g}", f"{st.mean_abs:.3g}",
               f"{st.max_rel:.3g}", f"{st.cosine:.6f}", str(st.nonfinite)]
        if top1:
            row.append("-" if st.top1_agreement is None else f"{st.top1_agreement:.4f}")
        table.add_row(*row)
    con.print(table)
    note = one_value_note(stats, "FP32")
    if note:
        con.print(note, markup=False)


def one_value_note(stats: Iterable[OutputStats], reference: str) -> str | None:
    """The line under an error table naming the outputs of one value per sample, whose "cosine" column holds
    their error against the RMS of the ``reference``'s values (None: there are none)."""
    names = [st.name for st in stats if st.measure != "cosine"]
    if not names:
        return None
    return (f"one value per sample: {', '.join(names)}: its \"cosine\" is 1/sqrt(1 + e^2), e its error over "
            f"the RMS of its {reference} values (docs/precision.md)")


def gate_line(doc: dict[str, Any]) -> str:
    """One line: the gate's verdict and on what it was judged."""
    limits = ", ".join(f"{k} {v}" for k, v in doc["thresholds"].items() if k not in ("per_output", "only"))
    for name, lim in doc["thresholds"].get("per_output", {}).items():
        limits += f"; {name}: " + ", ".join(f"{k} {v}" for k, v in lim.items())
    n = f" on n={doc['held_out_samples']} samples" if doc.get("held_out_samples") else ""
    if doc["violations"]:
        return f"accuracy gate: FAILED{n} ({limits})"
    if doc.get("error"):  # refused before the judgement (exit 8): there was data, it was never judged on
        return "accuracy gate: not reached (refused first: see the error line)"
    if doc["passed"] and doc.get("verdict"):
        return f"accuracy gate: {doc['verdict']} ({doc['accuracy_check']}; {limits})"
    if doc.get("unverified"):
        return f"accuracy gate: {doc['verdict']} ({doc['accuracy_check']}; {limits})"
    if doc["passed"]:
        return f"accuracy gate: passed on {doc['accuracy_check']} ({limits})"
    if doc["accuracy_check"] == "not checked":
        return "accuracy gate: not checked (no sample data)"
    return f"accuracy gate: not checked (judged on {doc['accuracy_check']}; pass held-out real data to check it)"


def print_gate(result: Any, model: Any, prepared: Any, refusal: TrtconvError | None = None) -> None:
    """``build``'s precision stage: the same report ``quantize`` prints, for the prepared ONNX. ``refusal``: the
    precision stage's own refusal (exit 8), which came before the judgement, so the gate line says so."""
    doc = {"model": str(model), "output": str(prepared), **result.to_json()}
    doc["written"] = False
    if refusal is not None:
        doc["error"] = {"exit_code": int(refusal.exit_code), "message": refusal.message, "hint": refusal.hint}
    if doc["precision"] == "fp16":
        r = doc["fp16"]
        print_fp16_part("FP16", r, r["folded_batchnorms"])
        print_accuracy(doc, r["samples"])
        stdout_console().print(gate_line(doc), markup=False)
    else:
        print_int8({**doc, "quiet_verdict": True})


def print_verdict(doc: dict[str, Any]) -> None:
    con = stdout_console()
    con.print(gate_line(doc), markup=False)
    if doc.get("quiet_verdict"):
        return
    if doc["written"]:
        con.print(f"wrote {doc['output']}" + (" (unverified)" if doc.get("unverified") else ""), markup=False)
    elif doc["violations"]:
        con.print("FAILED: " + "; ".join(doc["violations"]) + " - nothing written", markup=False)
    else:
        con.print("REFUSED: " + (doc.get("error") or {}).get("message", "") + " - nothing written", markup=False)
