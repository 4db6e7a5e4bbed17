"""The check report: frozen dataclasses, and their JSON form (schema ``trtconv.check/1``).

The JSON layout is a contract with CI scripts: fields are only ever added within a
schema version; renames or removals bump it. docs/cli.md documents every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtconv.errors import ExitCode
from trtconv.onnxutil.domains import display_domain

SCHEMA = "trtconv.check/1"

# Node status, from best to worst. A node is "rewritable" if `trtconv rewrite` has a rule for
# it, "plugin" if the parser will look for a plugin library the user must supply.
SUPPORTED, REWRITABLE, PLUGIN, UNSUPPORTED = "supported", "rewritable", "plugin", "unsupported"
STATUSES = (SUPPORTED, REWRITABLE, PLUGIN, UNSUPPORTED)
ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    rule: str  # stable id, e.g. "topk-k", "op-unsupported"
    severity: str  # "error": the parser rejects the node; "warning": it parses, but read this
    message: str
    hint: str = ""  # what to do about it; shown once per rule in human output

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class NodeReport:
    path: str  # node name, with its If/Loop/Scan parents: "If_0/then_branch/Conv_3"
    op_type: str
    domain: str
    status: str  # one of STATUSES
    findings: tuple[Finding, ...]
    rewrite: str | None = None  # rewrite rule id from trtconv.rewrites.catalog
    source: str = ""  # where the support-table row's fact comes from

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == ERROR)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "op_type": self.op_type, "domain": display_domain(self.domain),
            "status": self.status, "rewrite": self.rewrite, "source": self.source,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class InputReport:
    name: str
    dtype: str
    dims: tuple[int | str | None, ...]  # int fixed, str symbolic, None unknown
    dynamic: bool  # needs an optimization profile
    shape: tuple[int, ...] | None  # what --shapes gave, if anything

    @property
    def covered(self) -> bool:
        return not self.dynamic or self.shape is not None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims), "dynamic": self.dynamic,
                "shape": list(self.shape) if self.shape is not None else None, "covered": self.covered}


@dataclass(frozen=True)
class CheckReport:
    model: str
    target: str  # TensorRT version of the support table used
    node_count: int  # all nodes, subgraphs included
    counts: dict[str, int]  # status -> number of nodes
    nodes: tuple[NodeReport, ...]  # only nodes with findings; the others are supported as is
    inputs: tuple[InputReport, ...]
    warnings: tuple[str, ...]  # model-level notes (checker, topological order, ...)
    checker_error: str | None

    @property
    def verdict(self) -> str:
        if self.counts.get(UNSUPPORTED, 0):
            return UNSUPPORTED
        if self.counts.get(REWRITABLE, 0) or self.counts.get(PLUGIN, 0):
            return "needs-rewrite"
        return SUPPORTED

    @property
    def exit_code(self) -> ExitCode:
        return {SUPPORTED: ExitCode.OK, "needs-rewrite": ExitCode.NEEDS_REWRITE}.get(self.verdict, ExitCode.UNSUPPORTED)

    @property
    def warning_count(self) -> int:
        return sum(1 for n in self.nodes for f in n.findings if f.severity == WARNING)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "target": {"tensorrt": self.target},
            "verdict": self.verdict,
            "exit_code": int(self.exit_code),
            "summary": {"nodes": self.node_count, **{s: self.counts.get(s, 0) for s in STATUSES},
                        "warnings": self.warning_count},
            "inputs": [i.to_json() for i in self.inputs],
            "nodes": [n.to_json() for n in self.nodes],
            "warnings": list(self.warnings),
            "checker_error": self.checker_error,
        }
