"""The check report: frozen dataclasses, and their JSON form (schema ``trtconv.check/1``).

The JSON layout is a contract with CI scripts: fields are only ever added within a
schema version; renames or removals bump it. docs/cli.md documents every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtconv.errors import ExitCode
from trtconv.onnxutil import display_domain

SCHEMA = "trtconv.check/1"

# Node status, from best to worst. A node is "rewritable" if `trtconv rewrite` has a rule for
# it, "plugin" if the parser will look for a plugin library the user must supply.
SUPPORTED, REWRITABLE, PLUGIN, UNSUPPORTED = "supported", "rewritable", "plugin", "unsupported"
STATUSES = (SUPPORTED, REWRITABLE, PLUGIN, UNSUPPORTED)
ERROR, WARNING = "error", "warning"
# Which TensorRT step refuses an error finding: the ONNX parser, or the builder after a clean parse.
PARSER, BUILDER = "parser", "builder"


@dataclass(frozen=True)
class Finding:
    rule: str  # stable id, e.g. "topk-k", "op-unsupported"
    severity: str  # "error": the parser rejects the node; "warning": it parses, but read this
    message: str
    hint: str = ""  # what to do about it; shown once per rule in human output
    stage: str = PARSER  # PARSER or BUILDER: where TensorRT refuses it (for warnings: where it matters)

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "hint": self.hint,
                "stage": self.stage}


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
class LiveNode:
    """One node as check predicted it and as the real parser answered."""

    path: str
    op_type: str
    predicted: str  # the node's status, or "supported"
    parser: str  # "rejected: <parser's reason>", "accepted", or "no error reported" (the parse failed elsewhere)
    agrees: bool | None  # None: the parser never got to the node

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "op_type": self.op_type, "predicted": self.predicted, "parser": self.parser,
                "agrees": self.agrees}


@dataclass(frozen=True)
class LiveCheck:
    """The real TensorRT's own answer next to the prediction (``check --live``)."""

    tensorrt: str  # module and version, e.g. "tensorrt_rtx 1.7.1.116"
    parse: str  # "accept" | "reject"
    build: str | None  # "ok" | "fail" | None (not attempted: a TensorRT that cannot build without a GPU)
    predicted_parse: str
    predicted_build: str
    nodes: tuple[LiveNode, ...]  # nodes the parser rejected or check predicted it would
    build_errors: tuple[str, ...]
    # Inputs whose dynamic dims the build took as 1 (no --shapes for them). A build that fails there says
    # nothing of the model (a convolution over 1 sample), so it is reported and not counted.
    placeholder_inputs: tuple[str, ...] = ()
    failing_node: str | None = None  # where a failed build starts (trtconv.trt.failing_node), as said

    @property
    def build_judged(self) -> str | None:
        """The build's answer as it counts: a failure at placeholder shapes is no answer (None)."""
        return None if self.build == "fail" and self.placeholder_inputs else self.build

    @property
    def agrees(self) -> bool:
        return self.parse == self.predicted_parse and self.build_judged in (None, self.predicted_build)

    @property
    def succeeded(self) -> bool:
        return self.parse == "accept" and self.build_judged != "fail"

    def to_json(self) -> dict[str, Any]:
        return {"tensorrt": self.tensorrt, "parse": self.parse, "build": self.build,
                "build_counted": self.build_judged is not None,
                "placeholder_inputs": list(self.placeholder_inputs),
                "predicted": {"parse": self.predicted_parse, "build": self.predicted_build},
                "agrees": self.agrees, "nodes": [n.to_json() for n in self.nodes],
                "build_errors": list(self.build_errors), "failing_node": self.failing_node}


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
    # Findings about the model rather than one node (e.g. inputs sharing a dim name); ``rewrite``
    # set on a finding's entry in ``model_rewrites`` when `trtconv rewrite` fixes it.
    findings: tuple[Finding, ...] = ()
    model_rewrites: tuple[tuple[str, str], ...] = ()  # (finding rule, rewrite rule id)
    live: LiveCheck | None = None  # the real parser's answer (check --live), when a TensorRT was importable
    # refused as it is, with --shapes fixing every input: the verdict on the graph folded with them (what
    # `build --shapes` builds, and `rewrite --shapes` writes); None where not tried or the folding failed
    folded: str | None = None

    @property
    def verdict(self) -> str:
        fixable = dict(self.model_rewrites)
        model_errors = [f for f in self.findings if f.severity == ERROR]
        if self.counts.get(UNSUPPORTED, 0) or any(f.rule not in fixable for f in model_errors):
            # folding with the shapes is a rewrite, one `build --shapes` does itself
            return "needs-rewrite" if self.folded in (SUPPORTED, "needs-rewrite") else UNSUPPORTED
        if self.counts.get(REWRITABLE, 0) or self.counts.get(PLUGIN, 0) or model_errors:
            return "needs-rewrite"
        return SUPPORTED

    @property
    def predicted_exit_code(self) -> ExitCode:
        """The code of the prediction alone (what ``verdict`` says)."""
        return {SUPPORTED: ExitCode.OK, "needs-rewrite": ExitCode.NEEDS_REWRITE}.get(self.verdict,
                                                                                     ExitCode.UNSUPPORTED)

    @property
    def exit_code(self) -> ExitCode:
        """From the prediction; with a live answer, from TensorRT's own: it accepted (and built) -> 0,
        it refused -> the prediction's code if that refuses too, else 5. A build that failed only at
        placeholder shapes (dims trtconv took as 1) is no answer: the prediction stands."""
        predicted = self.predicted_exit_code
        if self.live is None:
            return predicted
        if self.live.succeeded and (self.live.build_judged is not None or self.stage() != BUILDER):
            return ExitCode.OK
        return predicted if predicted != ExitCode.OK else ExitCode.UNSUPPORTED

    @property
    def warning_count(self) -> int:
        return sum(1 for f in self.all_findings() if f.severity == WARNING)

    def all_findings(self) -> list[Finding]:
        return [f for n in self.nodes for f in n.findings] + list(self.findings)

    def stage(self) -> str | None:
        """The first TensorRT step predicted to refuse the model: "parser", "builder", or None."""
        stages = {f.stage for f in self.all_findings() if f.severity == ERROR}
        return PARSER if PARSER in stages else BUILDER if stages else None

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
            "stage": self.stage(),
            "findings": [{**f.to_json(), "rewrite": dict(self.model_rewrites).get(f.rule)} for f in self.findings],
            "live": self.live.to_json() if self.live is not None else None,
            "folded": None if self.folded is None else {"verdict": self.folded},
        }
