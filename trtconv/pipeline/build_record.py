"""What ``trtconv build`` records as it runs: a record per stage, the outcome a caller sees even
when the pipeline raises, the runner that keeps both, and the precision passes' progress as
phases of the build's progress sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from trtconv.outputs import file_identity
from trtconv.pipeline.quantize import (
    QuantizeResult,
)
from trtconv.plan import (
    manifest_path,
)
from trtconv.precision import PHASES

StageFn = Callable[[str, str], None]  # (stage, message): progress lines for the CLI
T = TypeVar("T")


@dataclass(frozen=True)
class StageRecord:
    name: str
    status: str  # "done" | "skipped" | "failed" | "interrupted"
    seconds: float = 0.0
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3), **self.detail}


@dataclass
class BuildOutcome:
    """How far the pipeline got: filled in as it runs, so a caller sees it even when it raises."""

    prepared: Path
    engine: Path | None = None
    manifest: dict[str, Any] | None = None
    stages: list[StageRecord] = field(default_factory=list)
    stopped: str | None = None  # why the pipeline stopped before an engine, if it did
    gate: QuantizeResult | None = None  # fp16/int8: the precision stage's accuracy gate (also when it failed)
    written: bool = False  # the prepared ONNX is on disk (written by this run and not removed)
    # caches this run may create (calibration, timing) that did not exist when it started: a failed
    # build removes them; a user's existing cache is never removed
    new_caches: list[Path] = field(default_factory=list)
    tail: Path | None = None  # --split-tail: the ONNX Runtime tail on disk (written with the prepared ONNX)
    # nodes check refused that the target's real parser took (build_parser.py): to correct the tables
    parser_disagreements: list[dict[str, str]] = field(default_factory=list)
    # each output path's file identity before the first stage (None: no file): a signal that lands
    # after a file was renamed into place but before the flags above say so still finds it changed
    before: dict[Path, tuple[int, ...] | None] = field(default_factory=dict)

    def snapshot(self, paths: Sequence[Path]) -> None:
        self.before = {Path(p): file_identity(Path(p)) for p in paths}

    def changed(self, path: Path) -> bool:
        """``path`` is a file this run wrote: it was snapshotted and is not the file that was there."""
        path = Path(path)
        return path in self.before and file_identity(path) not in (None, self.before[path])

    def to_json(self) -> dict[str, Any]:
        """Names only files that are on disk: a failed build removed what it wrote."""
        return {
            "prepared_onnx": str(self.prepared) if self.written else None,
            "tail_onnx": str(self.tail) if self.tail else None,
            "engine": str(self.engine) if self.engine else None,
            "manifest": str(manifest_path(self.engine)) if self.engine else None,
            "stopped": self.stopped,
            "parser_disagreements": list(self.parser_disagreements),
            "stages": [s.to_json() for s in self.stages],
            "verification": verification(self.stages, self.stopped),
        }


def _engine_line(by: Mapping[str, StageRecord], stopped: str | None) -> tuple[bool, str]:
    """(whether the engine ran, what happened to it)."""
    build, verify = by.get("build"), by.get("verify")
    if build is None or build.status != "done":
        return False, "no engine built" + (f" ({stopped})" if stopped else "")
    if verify is None:
        return False, "engine built, not run"
    if verify.status == "skipped":
        return False, f"engine built, not run: {verify.detail.get('reason') or 'no reason recorded'}"
    corners = verify.detail.get("corners") or []
    worst = max((o.get("max_abs") or 0.0 for c in corners for o in c.get("outputs") or []), default=None)
    figure = f", max abs {worst:.3g}" if isinstance(worst, float) else ""
    if verify.status == "done":
        return True, (f"engine run and verified: its outputs against ONNX Runtime's at {len(corners)} profile "
                      f"corner(s){figure}")
    return True, f"engine run: its outputs differ from ONNX Runtime's ({'; '.join(verify.detail.get('failures') or [])})"


def _checks(by: Mapping[str, StageRecord]) -> tuple[list[str], list[str]]:
    """(what ONNX Runtime verified before the engine, what was measured or done but not verified)."""
    done: list[str] = []
    not_done: list[str] = []
    rewrite = by.get("rewrite")
    count = int((rewrite.detail.get("rewritten") or 0) if rewrite is not None else 0)
    if rewrite is not None and count:
        proof = rewrite.detail.get("graph_proof") or {}
        nodes = int(rewrite.detail.get("node_proofs_passed") or 0)
        if nodes:
            done.append(f"{nodes} of {count} rewrite(s), node by node, against the original op on ONNX Runtime")
        if proof.get("passed") and proof.get("method") not in (None, "none"):
            scope = proof.get("scope") or {}
            where = "" if not scope or scope.get("whole_graph") else \
                f", where the change reaches ({sum(scope['nodes_run'])} of {sum(scope['nodes'])} nodes run)"
            done.append(f"the rewritten graph against the original on {proof['method']}{where}")
        else:
            not_done.append(f"the rewritten graph as a whole ({proof.get('reason') or proof.get('method')})")
    precision = by.get("precision")
    gate = (precision.detail.get("gate") or {}) if precision is not None and precision.status == "done" else {}
    wanted = str(precision.detail.get("precision") or "").upper() if precision is not None else ""
    if precision is not None and precision.status == "done" and not gate:
        not_done.append(f"the {wanted} prepared ONNX: accuracy not measured (no sample data)")
    if gate:
        on = gate.get("accuracy_check") or "the samples"
        if gate.get("checked") and gate.get("passed"):
            done.append(f"the {wanted} prepared ONNX against the FP32 original on ONNX Runtime ({on})")
        elif gate.get("accuracy"):
            not_done.append(f"{wanted} accuracy measured on {on}, not gated")
        else:  # the precision report's words: no accuracy figures means no sample data
            not_done.append(f"{wanted} accuracy not measured (no sample data)")
    split = by.get("split")
    if split is not None and split.status == "done":
        if (split.detail.get("proof") or {}).get("passed"):
            done.append("the engine graph then the tail against the model on ONNX Runtime")
        else:
            not_done.append(f"the split: {(split.detail.get('proof') or {}).get('reason') or 'not proven'}")
    return done, not_done


def verification(stages: Sequence[StageRecord], stopped: str | None = None) -> dict[str, Any]:
    """What the build verified and how, from its stage records, in words a report can print as they
    are: whether the engine ran (and if not, why), what ONNX Runtime checked before it, what was only
    measured. Never "passed" for an engine that was not run."""
    by = {s.name: s for s in stages}
    ran, engine = _engine_line(by, stopped)
    done, not_done = _checks(by)
    if done:
        summary = f"{engine}; verified: {'; '.join(done)}"
    elif by.get("rewrite") is not None and by.get("precision") is not None and not not_done:
        summary = f"{engine}; nothing else to verify: no rewrite and no precision change (fp32)"
    else:
        summary = engine
    if not_done:
        summary += f"; not verified: {'; '.join(not_done)}"
    verified = ran and by["verify"].status == "done"
    return {"engine_run": ran, "engine_verified": verified, "engine": engine, "verified": done,
            "not_verified": not_done, "summary": summary}


@dataclass(frozen=True)
class Step(Generic[T]):
    """What a stage returns: its result for the stages after it, and its line in the report."""

    value: T
    detail: Mapping[str, Any] = field(default_factory=dict)
    status: str = "done"



class ProgressPhases:
    """The precision passes' ``progress(stage, done, total)`` as phases of the build's progress
    sink (the one TensorRT's monitor feeds): a bar per phase on a terminal, lines in a log."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.current: str | None = None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        label = PHASES.get(stage, stage)
        if label != self.current:
            self.close()
            self.current = label
            self.sink.phase_start(label, None, total or 0)
        self.sink.step(label, done - 1)

    def close(self) -> None:
        if self.current is not None:
            self.sink.phase_finish(self.current)
        self.current = None


class StageRunner:
    def __init__(self, outcome: BuildOutcome, say: StageFn | None,
                 on_start: Callable[[str], None] | None = None) -> None:
        self.outcome = outcome
        self.say = say or (lambda stage, msg: None)
        self.on_start = on_start or (lambda stage: None)  # before each stage (the crash note: outputs.note_for_crash)

    def run(self, name: str, fn: Callable[[], Step[T]]) -> T:
        self.on_start(name)
        self.say(name, "running")
        start = time.monotonic()
        try:
            step = fn()
        except BaseException as exc:  # Ctrl-C/SIGTERM is no failure of the stage: said as what it was
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.outcome.stages.append(StageRecord(name, status, time.monotonic() - start))
            self.say(name, status)
            raise
        self.outcome.stages.append(StageRecord(name, step.status, time.monotonic() - start, dict(step.detail)))
        reason = step.detail.get("reason") if step.status == "skipped" else None
        self.say(name, f"{step.status} ({reason})" if reason else step.status)  # a skip always says why
        return step.value


