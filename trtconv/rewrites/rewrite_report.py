"""What ``rewrite`` did, for humans (``to_text``) and machines (``to_json``, schema trtconv.rewrite/1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from trtconv.onnxutil import qualified_op
from trtconv.rewrites.cleanup import CleanupResult
from trtconv.rewrites.dtype_narrowing import DtypeChange
from trtconv.rewrites.emitter import PENDING_DOMAIN
from trtconv.rewrites.proof import Proof
from trtconv.rewrites.rewrite_settings import RewriteSettings

SCHEMA = "trtconv.rewrite/1"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op: str  # "domain::Op" or "Op" for the default domain
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any]

    @staticmethod
    def of(node: gs.Node) -> NodeInfo:
        op = qualified_op(None if node.domain == PENDING_DOMAIN else node.domain, node.op)
        return NodeInfo(node.name, op, tuple(t.name for t in node.inputs), tuple(t.name for t in node.outputs),
                        {k: _jsonable(v) for k, v in sorted(node.attrs.items())})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs), "outputs": list(self.outputs),
                "attributes": dict(self.attributes)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist() if v.size <= 16 else f"<tensor {v.dtype} {list(v.shape)}>"
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, gs.Graph):
        return f"<graph {v.name}>"
    if isinstance(v, gs.Constant):
        return _jsonable(np.asarray(v.values))
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


@dataclass(frozen=True)
class RewriteEntry:
    node: str
    rule: str
    target: str
    before: NodeInfo
    after: tuple[NodeInfo, ...]
    proof: Proof
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "rule": self.rule, "target": self.target, "before": self.before.to_json(),
                "after": [a.to_json() for a in self.after], "proof": self.proof.to_json(), "notes": list(self.notes)}


@dataclass(frozen=True)
class SteppedAside:
    """A rewrite dropped because its proof failed or could not run (``RewriteSettings.step_aside``):
    a rule at one node (the node stays as it was) or a clean-up of the whole graph (``node`` empty)."""

    node: str
    op: str
    rule: str
    reason: str

    def describe(self) -> str:
        where = f"node {self.node!r} ({self.op}): {self.rule}" if self.node else f"clean-up {self.rule}"
        return f"{where} stepped aside, its proof failed: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node or None, "op": self.op or None, "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class RewriteReport:
    """Everything ``rewrite`` did, for humans (``to_text``) and machines (``to_json``, schema trtconv.rewrite/1)."""

    settings: RewriteSettings
    rewrites: tuple[RewriteEntry, ...]
    cleanups: tuple[CleanupResult, ...]
    graph_proof: Proof
    nodes_before: int
    nodes_after: int
    opset_before: int
    opset_after: int
    notes: tuple[str, ...] = ()
    drift: Proof | None = None  # the whole model against the original, where a rule changed the numbers
    dtype_changes: tuple[DtypeChange, ...] = ()  # inputs/outputs whose element type changed
    stepped_aside: tuple[SteppedAside, ...] = ()  # rewrites dropped because their proof failed (build)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "settings": self.settings.to_json(),
            "rewrites": [r.to_json() for r in self.rewrites],
            "cleanups": [c.to_json() for c in self.cleanups],
            "graph_proof": self.graph_proof.to_json(),
            "drift": None if self.drift is None else self.drift.to_json(),
            "dtype_changes": [c.to_json() for c in self.dtype_changes],
            "summary": {
                "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after,
                "rewritten": len(self.rewrites),
                "opset_before": self.opset_before,
                "opset_after": self.opset_after,
            },
            "notes": list(self.notes),
            "stepped_aside": [a.to_json() for a in self.stepped_aside],
        }

    def to_text(self) -> str:
        lines = [f"rewrote {len(self.rewrites)} node(s); nodes {self.nodes_before} -> {self.nodes_after}; "
                 f"opset {self.opset_before} -> {self.opset_after}"]
        for r in self.rewrites:
            after = ", ".join(a.op for a in r.after)
            proof = _proof_text(r.proof)
            lines.append(f"  {r.node}: {r.rule}: {r.before.op} -> {after}  [{proof}]")
            lines.extend(f"    note: {n}" for n in r.notes)
        for c in self.cleanups:
            if c.count or c.notes:
                detail = f": {', '.join(c.items[:5])}{' ...' if len(c.items) > 5 else ''}" if c.items else ""
                lines.append(f"  {c.rule}: {c.count}{detail}")
                lines.extend(f"    note: {n}" for n in c.notes if c.count or c.rule != "fold-constants")
        lines.extend(f"  {c.kind} {c.name!r} changed type: {c.before} -> {c.after} ({c.rule})" for c in self.dtype_changes)
        lines.append(f"  graph proof: {_proof_text(self.graph_proof)}")
        if self.graph_proof.scope:
            lines.append(f"    {scope_text(self.graph_proof.scope)}")
        if self.drift is not None:
            lines.append(f"  against the original: {_drift_text(self.drift)}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  note: {a.describe()}" for a in self.stepped_aside)
        return "\n".join(lines)


def _proof_text(p: Proof) -> str:
    if p.method == "none":  # printed after "graph proof: ", whose words the reason need not repeat
        return (p.reason or "not proven").removeprefix("graph proof ")
    status = "passed" if p.passed else "FAILED"
    err = f" max|err| {p.max_abs:.2g} <= {p.tolerance:.2g}" if p.max_abs is not None and p.tolerance else ""
    if err and p.arithmetic != "float32":
        err += f" ({p.arithmetic} arithmetic)"
    return f"{p.method} {status}{err}" + (f" ({p.reason})" if p.reason else "")


def scope_text(scope: Mapping[str, Any]) -> str:
    """How much of the two graphs the graph proof ran (``Proof.scope``), in a line."""
    if scope.get("whole_graph"):
        before, after = scope.get("nodes_run") or scope.get("nodes") or [0, 0]
        return f"ran both whole graphs ({before} and {after} nodes): {scope.get('why') or 'asked for'}"
    compared, unreached = scope.get("outputs_compared") or [], scope.get("outputs_unreached") or []
    region = scope.get("region") or [0, 0]
    text = (f"sized by the change: {scope.get('prefix', 0)} original node(s) run once, then the changed region "
            f"({region[0]} original, {region[1]} rewritten node(s)); {len(compared)} of "
            f"{len(compared) + len(unreached)} output(s) reached and compared")
    if scope.get("checks"):
        text += f"; {scope['checks']} folded constant(s) checked"
    return text + f"; {int(scope.get('weights_written_bytes') or 0) / 2**20:.1f} MiB of weights written once"


def _drift_text(p: Proof) -> str:
    if p.method == "none" or not p.stats:
        return p.reason or "not measured"
    worst = max(p.stats, key=lambda s: s.max_abs)
    return f"max|err| {worst.max_abs:.3g}, max rel {worst.max_rel:.3g}, cosine {worst.cosine:.6f} ({p.reason})"


@dataclass(frozen=True)
class RewriteResult:
    model: onnx.ModelProto
    report: RewriteReport
