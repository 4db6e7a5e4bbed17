"""`check`'s prediction for a case, the real verdict in the same terms, and the tallies.

Two levels: **parse** (does OnnxParser accept the model?) and **build** (does the model
parse *and* build?). `check` predicts a parse rejection from its error findings whose
``stage`` is ``parser`` (or an invalid model), a build failure from any error finding.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tools.oracle.cases import Case
from trtconv.analyze import analyze
from trtconv.errors import TrtconvError
from trtconv.load import load_model

ACCEPT, REJECT = "accept", "reject"
OK, FAIL = "ok", "fail"


def _findings(report: Any) -> list[Any]:
    return [f for n in report.nodes for f in n.findings] + list(getattr(report, "findings", ()))


def predict(case: Case, target: str) -> dict[str, Any]:
    """What ``check --trt target [--shapes profile]`` says about the case, as parse/build verdicts."""
    try:
        report = analyze(load_model(case.path, structure_only=True), target, case.shapes or None)
    except TrtconvError as exc:
        return {"parse": REJECT, "build": FAIL, "verdict": "invalid", "errors": [f"exit {int(exc.exit_code)}: "
                                                                                  f"{str(exc)[:160]}"]}
    errors = [f for f in _findings(report) if f.severity == "error"]
    at_parse = [f for f in errors if getattr(f, "stage", "parser") == "parser"]
    return {"parse": REJECT if at_parse else ACCEPT, "build": FAIL if errors else OK, "verdict": report.verdict,
            "errors": sorted({f"{getattr(f, 'stage', 'parser')}:{f.rule}" for f in errors})}


def real_levels(real: dict[str, Any]) -> dict[str, str]:
    parse = ACCEPT if real.get("parsed") else REJECT
    build = OK if parse == ACCEPT and real.get("built") else FAIL
    return {"parse": parse, "build": build}


def real_reason(real: dict[str, Any]) -> str:
    if not real.get("parsed"):
        errs = real.get("parser_errors") or []
        return "; ".join(f"{e['op_type'] or '-'}: {e['desc'][:200]}" for e in errs[:2]) or "parse failed"
    if not real.get("built"):
        return "; ".join(e[:240] for e in (real.get("build_errors") or [])[-2:]) or "build returned None"
    return ""


def matrix(rows: list[dict[str, Any]], target: str, level: str) -> dict[str, Any]:
    """Confusion counts (predicted x real) and agreement over the rows that are not product limits."""
    counted = [r for r in rows if level not in r.get("limit_levels", ())]
    cells = Counter(f"check {r['check'][target][level]} / real {r['real_levels'][level]}" for r in counted)
    agree = sum(1 for r in counted if r["check"][target][level] == r["real_levels"][level])
    return {"cases": len(counted), "agree": agree, "agreement": round(agree / len(counted), 4) if counted else None,
            "cells": dict(sorted(cells.items()))}
