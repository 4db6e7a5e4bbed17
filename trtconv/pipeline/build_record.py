"""What ``trtconv build`` records as it runs: a record per stage, the outcome a caller sees even
when the pipeline raises, the runner that keeps both, and the precision passes' progress as
phases of the build's progress sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

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
    status: str  # "done" | "skipped" | "failed"
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
        }


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
    def __init__(self, outcome: BuildOutcome, say: StageFn | None) -> None:
        self.outcome = outcome
        self.say = say or (lambda stage, msg: None)

    def run(self, name: str, fn: Callable[[], Step[T]]) -> T:
        self.say(name, "running")
        start = time.monotonic()
        try:
            step = fn()
        except BaseException:
            self.outcome.stages.append(StageRecord(name, "failed", time.monotonic() - start))
            self.say(name, "failed")
            raise
        self.outcome.stages.append(StageRecord(name, step.status, time.monotonic() - start, dict(step.detail)))
        self.say(name, step.status)
        return step.value


