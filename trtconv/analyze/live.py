"""Put the real parser's answer next to the prediction (``check --live``), node by node.

The caller (the API) runs TensorRT and hands the verdict over as plain data (the JSON form
of ``trtconv.trt.realparse.RealVerdict``): this layer never imports TensorRT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from trtconv.analyze.check_report import ERROR, PARSER, SUPPORTED, CheckReport, LiveCheck, LiveNode

ACCEPT, REJECT, OK, FAIL = "accept", "reject", "ok", "fail"


def error_path(err: Mapping[str, Any]) -> str:
    """The report's path for a parser error: the node's name, else OpType_index (graph.display_name)."""
    if err.get("node_name"):
        return str(err["node_name"])
    if int(err.get("node", -1)) >= 0 and err.get("op_type"):
        return f"{err['op_type']}_{int(err['node'])}"
    return "(model)"


def compare_live(report: CheckReport, real: Mapping[str, Any]) -> CheckReport:
    """``report`` with ``live`` filled from ``real`` (a RealVerdict's JSON form)."""
    errors = {f.rule for f in report.all_findings() if f.severity == ERROR}
    predicted_parse = REJECT if any(f.severity == ERROR and f.stage == PARSER for f in report.all_findings()) \
        else ACCEPT
    predicted_build = FAIL if errors else OK
    parse = ACCEPT if real.get("parsed") else REJECT
    build = None if parse == REJECT or real.get("built") is None else (OK if real.get("built") else FAIL)
    rejected = {}
    for err in real.get("parser_errors") or []:
        rejected.setdefault(error_path(err), (str(err.get("op_type") or ""), str(err.get("desc") or "")))
    by_path = {n.path: n for n in report.nodes}
    nodes = []
    for path in list(dict.fromkeys([*rejected, *(n.path for n in report.nodes)])):
        node = by_path.get(path)
        predicts_reject = node is not None and any(f.severity == ERROR and f.stage == PARSER for f in node.findings)
        if node is not None and not predicts_reject and path not in rejected:
            continue  # warnings or builder-stage findings only, and the parser took it: nothing to compare
        op = node.op_type if node is not None else rejected[path][0]
        if path in rejected:
            answer, agrees = f"rejected: {rejected[path][1]}", predicts_reject
        elif parse == REJECT:
            answer, agrees = "no error reported (the parser may have stopped before this node)", None
        else:
            answer, agrees = "accepted", not predicts_reject
        nodes.append(LiveNode(path, op, node.status if node is not None else SUPPORTED, answer, agrees))
    placeholders = tuple(i.name for i in report.inputs if i.dynamic and not i.covered) if build is not None else ()
    live = LiveCheck(f"{real.get('module', '?')} {real.get('version', '?')}", parse, build, predicted_parse,
                     predicted_build, tuple(nodes), tuple(str(e) for e in real.get("build_errors") or ()),
                     placeholders)
    return replace(report, live=live)
