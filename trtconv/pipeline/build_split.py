"""``build --split-tail``'s stage: the model cut where the target cannot run its data-dependent
post-processing (``trtconv.rewrites`` ``cut_tail``), the cut proven on ONNX Runtime, and what the
manifest, the report and the hints say of it. The head then goes through the normal build; the
tail is written beside the engine with the prepared ONNX and removed with it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trtconv.errors import AccuracyError, UnsupportedModelError
from trtconv.load import LoadedModel, file_sha256, infer_shapes, save_model
from trtconv.onnxutil import iter_graphs
from trtconv.pipeline.build_record import Step
from trtconv.pipeline.build_settings import BuildSettings
from trtconv.plan import target_name
from trtconv.reference import random_feeds
from trtconv.rewrites import SPLIT_FLAG, CutProof, TailCut, cut_tail, prove_cut, tail_ops
from trtconv.samples import SampleSet

log = logging.getLogger(__name__)
SPLIT_DOC = "docs/build.md#split-tail"


@dataclass(frozen=True)
class Split:
    """The cut the build made: the head is what it builds; the tail is written beside the engine."""

    cut: TailCut
    proof: CutProof
    tail_path: Path

    def manifest(self) -> dict[str, Any]:
        """The manifest's ``split`` block (the tail's hash once it is written)."""
        sha = file_sha256(self.tail_path) if self.tail_path.exists() else None
        return {"tail": {"file": self.tail_path.name, "sha256": sha}, **self.cut.to_json(),
                "proof": self.proof.to_json(),
                "run": f"the engine, then the tail on ONNX Runtime fed the engine's cut outputs ({SPLIT_DOC})"}


def _model_ops(loaded: LoadedModel, ops: tuple[str, ...]) -> list[str]:
    return sorted({n.op_type for g in iter_graphs(loaded.proto.graph) for n in g.node if n.op_type in ops})


def split_stage(loaded: LoadedModel, req: BuildSettings, target: str, tail_path: Path,
                samples: SampleSet | None, shapes: dict[str, tuple[int, ...]]) -> Step[Split | None]:
    """The cut and its proof; skipped (saying why) where the target runs every op, or the model has none."""
    ops = tail_ops(target)
    if not ops:
        reason = f"{target_name(target)} runs NonZero and NonMaxSuppression natively: nothing split"
        log.warning("%s: %s", SPLIT_FLAG, reason)
        return Step(None, {"reason": reason}, "skipped")
    cut = cut_tail(loaded.proto, ops, infer_shapes(loaded, symbolic=False))
    if cut is None:
        reason = f"the model's main graph has no {' or '.join(ops)} node: nothing split"
        log.warning("%s: %s", SPLIT_FLAG, reason)
        return Step(None, {"reason": reason}, "skipped")
    sample = next(iter(samples), None) if samples is not None else None
    if sample is not None:
        feeds, inputs = dict(sample), "the first sample of the sample data"
    else:
        feeds, inputs = random_feeds(loaded.proto, shapes, seed=req.seed), f"seeded random inputs (seed {req.seed})"
    proof = prove_cut(str(loaded.path), cut, feeds, inputs=inputs, tolerance=req.tolerance)
    if req.precision != "fp32":
        proof = replace(proof, arithmetic=f"float32 (the float graphs; the {req.precision} engine against its head "
                                          "is what verify checks)")
    if proof.passed is False:
        raise AccuracyError(f"{SPLIT_FLAG}: head → tail differs from the model on ONNX Runtime: "
                            f"{proof.reason or f'max abs error {proof.max_abs:.3g}'}",
                            hint="please report it (a trtconv bug); build for TensorRT 10/11 meanwhile")
    if proof.passed is None:
        log.warning("%s: the split is not proven: %s", SPLIT_FLAG, proof.reason)
    split = Split(cut, proof, tail_path)
    return Step(split, {"tail": str(tail_path), "at": list(cut.at), "cut": [c.name for c in cut.cut],
                        "head_nodes": cut.head_nodes, "tail_nodes": cut.tail_nodes,
                        "proof": {"passed": proof.passed, "max_abs": proof.max_abs, "max_rel": proof.max_rel,
                                  "inputs": inputs, "reason": proof.reason}})


def head_of(loaded: LoadedModel, split: Split | None) -> LoadedModel:
    """What the build builds: the head when the model was split, else the model."""
    return loaded if split is None else replace(loaded, proto=split.cut.head, checker_error=None)


def write_tail(split: Split) -> None:
    save_model(split.cut.tail, split.tail_path, force=True)


def split_hint(loaded: LoadedModel, target: str, command: str, req: BuildSettings) -> str | None:
    """The hint of an unsupported-model error when the model's blocking ops are ones ``--split-tail``
    moves to ONNX Runtime: the user's command with the flag, runnable as printed."""
    found = _model_ops(loaded, tail_ops(target))
    if not found or req.split_tail:
        return None
    return (f"{' and '.join(found)} cannot run on {target_name(target)}: `{command}{req.shape_flags()} {SPLIT_FLAG}` builds the "
            "graph before it and writes the rest as an ONNX tail for ONNX Runtime beside the engine "
            f"({SPLIT_DOC})")


def refuse_split_error(exc: UnsupportedModelError, hint: str | None) -> UnsupportedModelError:
    return exc if hint is None else UnsupportedModelError(exc.message, hint=hint)
