"""The real parser decides what ``trtconv build`` refuses.

``check`` predicts from tables; where the target's own parser is installed (``--trt rtx`` with
TensorRT-RTX, ``--trt 10.16``/``11.4`` with that TensorRT), the prediction is advice: a prepared
ONNX that ``check`` refuses is handed to the real parser (and, for TensorRT-RTX, a CPU-only build)
in a child process, and only their refusal refuses. Where they take what ``check`` refused, the
disagreement is recorded (the build's report, ``--json`` and the manifest's
``parser_disagreements``) so the tables can be corrected; so is, after a failed build, a node the
parser rejected that ``check`` said it would take. Without the target installed, the
prediction decides. One kind of finding is not a prediction and always refuses: a custom-domain op
the parser would import as a different ONNX op (``domain-blind-import``: it may build, wrongly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtconv.analyze import DOMAIN_BLIND, NodeReport, error_path
from trtconv.plan import target_name
from trtconv.rewrites import SteppedAside
from trtconv.trt import RTX_MODULE, run_isolated, target_module

SHOWN = 5  # nodes named in a refusal (the report lists them all)


@dataclass(frozen=True)
class Disagreement:
    """A node ``check`` refused that the real parser (and builder) took."""

    node: str
    op: str
    predicted: str  # check's status and first reason
    real: str  # what the real TensorRT did with the prepared ONNX

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "predicted": self.predicted, "real": self.real}


def real_parser(target: str, refused: Sequence[NodeReport]) -> str | None:
    """The module whose parser decides these refusals, or None: the prediction decides (the target's
    parser is not installed, or a refusal is not the parser's to overrule)."""
    if not refused or any(f.rule == DOMAIN_BLIND for n in refused for f in n.errors):
        return None
    return target_module(target)


Ranges = Mapping[str, Sequence[int] | Mapping[str, Sequence[int]]]


def ask(path: Path, module: str, shapes: Ranges, values: Ranges | None = None) -> dict[str, Any]:
    """The real parser's verdict on ``path`` (JSON form of realparse.RealVerdict); TensorRT-RTX also builds
    it, without a GPU, with one profile: ``shapes`` per input, a shape or a min/opt/max range, and
    ``values`` likewise for shape-tensor inputs (the build's first profile)."""
    return run_isolated(path, module, build=module == RTX_MODULE, shapes=shapes, values=values)


def accepted(real: Mapping[str, Any]) -> bool:
    """Parsed, and built where a build was tried; a build that ran out of the probe's time is no
    refusal (the build stage decides)."""
    return bool(real.get("parsed")) and (real.get("built") is not False or real.get("aborted") == "timeout")


def predicted(node: NodeReport) -> str:
    reason = node.errors[0].message if node.errors else ""
    return f"{node.status}: {reason}" if reason else node.status


def disagreements(refused: Sequence[NodeReport], real: Mapping[str, Any]) -> tuple[Disagreement, ...]:
    what = ("parsed and built" if real.get("built") else "parsed (its build did not finish in time here)"
            if real.get("aborted") == "timeout" else "parsed (no build tried here)")
    tensorrt = f"{real.get('module', '?')} {real.get('version', '?')}"
    return tuple(Disagreement(n.path, n.op_type, predicted(n), f"{what} by {tensorrt}") for n in refused)


def aside_reasons(aside: Sequence[SteppedAside]) -> dict[str, str]:
    """Node -> why its rewrite stepped aside (the node stayed as it was)."""
    return {a.node: f"its rewrite by {a.rule} failed its proof ({a.reason})" for a in aside if a.node}


def early_refusal(path: Path, module: str, target: str, refused: Sequence[NodeReport]) -> str | None:
    """The model as given (``path``) to the real parser, parse only: where it rejects a node ``check``
    calls unsupported (no rule rewrites it, so the prepared ONNX will hold it too), the refusal's line,
    before any heavy stage; else None (the recheck decides)."""
    real = run_isolated(path, module, build=False)
    if real.get("parsed"):
        return None
    names = {n.path for n in refused}
    hits = [e for e in real.get("parser_errors") or [] if error_path(e) in names]
    if not hits:
        return None
    return refusal(target, {**real, "parser_errors": hits}, refused, {}, what=path.name)


def refusal(target: str, real: Mapping[str, Any], refused: Sequence[NodeReport],
            aside: Mapping[str, str], what: str = "the prepared ONNX") -> str:
    """One line: what the real parser or builder said, and for a node whose rewrite stepped aside, why
    neither form builds."""
    tensorrt = f"{real.get('module', '?')} {real.get('version', '?')}"
    if not real.get("parsed"):
        errors = list(real.get("parser_errors") or [])
        items = []
        for err in errors[:SHOWN]:
            node = error_path(err)
            why = str(err.get("desc") or "").strip().splitlines()[0][:300] if err.get("desc") else "rejected"
            op = f" ({err['op_type']})" if err.get("op_type") else ""
            items.append(f"{node}{op}: {why}" + (f"; {aside[node]}" if node in aside else ""))
        more = f" (and {len(errors) - SHOWN} more)" if len(errors) > SHOWN else ""
        return (f"{target_name(target)}'s parser ({tensorrt}) rejects {len(errors) or 'the'} node(s) of "
                f"{what}: {'; '.join(items) or 'no details reported'}{more}")
    errors = [str(e).strip() for e in real.get("build_errors") or [] if str(e).strip()]
    names = ", ".join(f"{n.path} ({n.op_type}" + (f"; {aside[n.path]}" if n.path in aside else "") + ")"
                      for n in refused[:SHOWN])
    return (f"{target_name(target)} cannot build {what} ({tensorrt}'s builder: "
            f"{errors[0].splitlines()[0][:300] if errors else 'no details reported'}); check predicted it for {names}")


def unpredicted_rejections(nodes: Sequence[NodeReport], path: Path, module: str) -> tuple[Disagreement, ...]:
    """After a failed build: the nodes of ``path`` the real parser rejects (parse only, in a child
    process) that ``check`` (``nodes``: its report on that file) predicted it would take."""
    real = run_isolated(path, module, build=False)
    if real.get("parsed"):
        return ()
    by_path = {n.path: n for n in nodes}
    tensorrt = f"{real.get('module', '?')} {real.get('version', '?')}"
    found = []
    for err in real.get("parser_errors") or []:
        name = error_path(err)
        node = by_path.get(name)  # the report lists nodes with findings; one without was predicted supported
        if (node is not None and node.errors) or int(err.get("node", -1)) < 0:  # predicted, or not a node
            continue
        why = str(err.get("desc") or "").strip().splitlines()[0][:300] if err.get("desc") else "rejected"
        op = node.op_type if node is not None else str(err.get("op_type") or "")
        found.append(Disagreement(name, op, node.status if node is not None else "supported",
                                  f"rejected by {tensorrt}'s parser: {why}"))
    return tuple(found)

