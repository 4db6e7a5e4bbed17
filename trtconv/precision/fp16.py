"""FP16 made explicit in the ONNX, with the nodes that cannot take it kept in FP32.

TensorRT 11 builds strongly typed networks only, so "FP16" means an ONNX whose
tensors already are FP16 (trt-facts §1). This module is that conversion: fold
BatchNorms that would overflow, ask the rules in :mod:`trtconv.precision.fp16_rules`
which nodes must stay FP32, rewrite the graph (:mod:`trtconv.precision.fp16_graph`),
then prove the result with ONNX Runtime on sample data: it loads, has no NaN/Inf, and
its error against the FP32 model is reported per output.

``convert_fp16`` is pure: model and settings in, new model and report out; nothing is
written. ``trtconv quantize`` and ``trtconv build --precision fp16`` both call it.
"""

from __future__ import annotations

import glob
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from trtconv.errors import AccuracyError, InternalError, InvalidModelError, WithResult
from trtconv.load import (
    approx_size,
    check_structure_only,
    ensure_room,
    has_lazy_weights,
    spill,
)
from trtconv.onnxutil import GraphView, iter_graphs, sort_nodes
from trtconv.precision import fp16_rules as rules
from trtconv.precision.bn_fold import FoldedBatchNorm, fold_batchnorms
from trtconv.precision.fp16_check import ProgressFn, fp16_accuracy, fp16_inputs
from trtconv.precision.fp16_graph import Decision, Rewriter, inferred_structure
from trtconv.precision.fp16_locate import (
    LOCATE_SAMPLES,
    MAX_SAMPLES,
    ErrorStart,
    error_starts,
    kept_in_fp32,
    refusal_hint,
    threshold_for,
)
from trtconv.precision.peaks import activation_peaks
from trtconv.reference import (
    OutputStats,
    Thresholds,
    ort,
    violations,
    violations_line,
)
from trtconv.samples import sample_count

log = logging.getLogger(__name__)

DEFAULT_MAX_ACTIVATION = 4096.0
# The FP32 outputs of the peaks pass are kept for the accuracy check up to this many bytes.
REFERENCE_KEEP_BYTES = 256 << 20
# the lowest cosine a failed check offers as the retry's --min-cosine (a near miss, not a broken conversion)
NEAR_MISS = 0.99


@dataclass(frozen=True)
class Fp16Settings:
    """How to convert. Frozen: the same settings always give the same model."""

    keep_io_types: bool = True  # graph inputs/outputs stay FP32; Casts at the edges
    fold_batchnorm: bool = True  # fold Conv→BatchNormalization first (PP-OCR det's 1e8 variance)
    max_initializer: float | None = rules.FP16_MAX  # keep nodes whose constants exceed this; None: off
    max_activation: float | None = DEFAULT_MAX_ACTIVATION  # keep nodes whose tensors exceed this on samples
    exclude_ops: frozenset[str] = frozenset()  # op types kept in FP32
    exclude_nodes: tuple[str, ...] = ()  # node-name glob patterns kept in FP32
    check_accuracy: bool = True  # with samples: run both models in ONNX Runtime and compare
    thresholds: Thresholds = field(default_factory=Thresholds)  # NaN/Inf always fails unless allowed

    def rules(self) -> tuple[rules.Rule, ...]:
        """The rules in the order they are asked; the first that answers names the reason."""
        out = []
        if self.exclude_ops:
            out.append(rules.excluded_op(frozenset(self.exclude_ops)))
        if self.exclude_nodes:
            out.append(rules.excluded_name(tuple(self.exclude_nodes)))
        out += [rules.no_fp16_variant(), rules.trt_fp32_only(), rules.shape_computation(), rules.vanishing_epsilon()]
        if self.max_initializer is not None:
            out.append(rules.initializer_range(self.max_initializer))
        if self.max_activation is not None:
            out.append(rules.activation_range(self.max_activation))
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["exclude_ops"] = sorted(self.exclude_ops)
        d["exclude_nodes"] = list(self.exclude_nodes)
        return d


def rule_summaries() -> dict[str, str]:
    """Rule id → one-line summary, for reports (every rule, whatever the settings)."""
    every = Fp16Settings(exclude_ops=frozenset({"-"}), exclude_nodes=("-",)).rules()
    return {r.id: r.summary for r in every}


@dataclass(frozen=True)
class KeptNode:
    graph: str
    name: str
    op_type: str
    rule: str
    detail: str


@dataclass(frozen=True)
class Fp16Report:
    float_nodes: int  # nodes computing float32 in the input model (after BN folding)
    converted: int
    converted_by_graph: dict[str, int]  # "main" or a subgraph path such as "If_0/then_branch"
    kept: tuple[KeptNode, ...]
    casts_inserted: int
    constants_converted: int
    folded_batchnorms: tuple[FoldedBatchNorm, ...]
    samples: int  # samples used for activation peaks and accuracy (0: none given)
    activation_check: bool  # whether activation peaks were measured
    accuracy: tuple[OutputStats, ...]
    violations: tuple[str, ...]
    settings: Fp16Settings
    error_starts: tuple[ErrorStart, ...] = ()  # after a failed check: where the error starts
    keep_fp32: tuple[str, ...] = ()  # nodes whose keeping in FP32 met the thresholds on the samples searched

    def kept_by_rule(self) -> dict[str, list[KeptNode]]:
        out: dict[str, list[KeptNode]] = {}
        for k in self.kept:
            out.setdefault(k.rule, []).append(k)
        return out

    @property
    def passed(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "float_nodes": self.float_nodes,
            "converted": self.converted,
            "converted_by_graph": dict(self.converted_by_graph),
            "kept_fp32": len(self.kept),
            "kept": [asdict(k) for k in self.kept],
            "kept_by_rule": {r: len(v) for r, v in sorted(self.kept_by_rule().items())},
            "casts_inserted": self.casts_inserted,
            "constants_converted": self.constants_converted,
            "folded_batchnorms": [asdict(f) for f in self.folded_batchnorms],
            "samples": self.samples,
            "activation_check": self.activation_check,
            "accuracy": [s.to_json() for s in self.accuracy],
            "violations": list(self.violations),
            "passed": self.passed,
            "error_starts": [asdict(e) for e in self.error_starts],
            "keep_fp32": list(self.keep_fp32),
            "settings": self.settings.to_json(),
        }


@dataclass(frozen=True)
class Fp16Result:
    model: onnx.ModelProto
    report: Fp16Report
    half_tensors: frozenset[str] = frozenset()  # node outputs stored in FP16 (for emulate_half)


class Fp16AccuracyError(WithResult, AccuracyError):
    """The FP16 model misses the thresholds; ``result`` still holds the model and the full report."""

    result: Fp16Result


def convert_fp16(
    model: onnx.ModelProto,
    settings: Fp16Settings | None = None,
    samples: Iterable[Mapping[str, np.ndarray]] | None = None,
    *,
    progress: ProgressFn | None = None,
    peaks: Mapping[str, float] | None = None,
    check_loads: bool = True,
    locate: bool = True,
) -> Fp16Result:
    """FP16 copy of ``model`` (weights loaded) and the report of what was kept in FP32 and why.

    ``samples`` (re-iterable: a list, a :class:`~trtconv.samples.sources.SampleSet`)
    enables the activation-range rule and the accuracy check. Raises
    :class:`Fp16AccuracyError` (exit 7) when the FP16 model has NaN/Inf or misses
    ``settings.thresholds``. ``peaks``: activation peaks already measured (tensor name →
    max |x|), used by the activation-range rule instead of measuring on ``samples`` (the INT8
    stage measures once and converts several candidate models). ``check_loads=False`` skips
    opening the result in ONNX Runtime when the caller runs it next anyway. ``locate``: after a failed
    check, find where the error starts on a few samples and which nodes kept in FP32 meet the thresholds
    there (:func:`_refusal`; only then, and a few model runs).
    """
    settings = settings or Fp16Settings()
    total = sample_count(samples) if samples is not None else None

    def say(stage: str, done: int = 0) -> None:
        if progress is not None:
            progress(stage, done, total if stage == "peaks" else None)

    if samples is not None and not hasattr(samples, "__len__"):
        samples = list(samples)  # a generator: we need two passes
    ensure_room(approx_size(model), "copying the model for FP16")  # protobuf's copy crashes when out of memory
    work = onnx.ModelProto()
    work.CopyFrom(model)

    sort_nodes(work)  # the rules read each node's producers first; some exporters write unsorted graphs
    # Peaks before the folds: the model as given, so the pass's outputs are the accuracy check's reference too
    # (a folded Conv writes its BatchNormalization's output name: every tensor the rules ask about is measured).
    peak_map, n_samples, measured, reference = _activation_peaks(work, samples, settings, peaks, say)
    peak_of = peak_map.get if peak_map is not None else (lambda _n: None)
    folded: tuple[FoldedBatchNorm, ...] = ()
    if settings.fold_batchnorm:
        work, folded = fold_batchnorms(work, copy=False)  # ``work`` is our own copy already
        say("fold", len(folded))
    work = _with_types(work)
    say("convert")
    rw = Rewriter(work, settings.rules(), keep_io_types=settings.keep_io_types, activation_peak=peak_of)
    out = rw.run()
    del work
    rw.model = onnx.ModelProto()  # only ``out`` and the input model are needed from here on
    rw.view = GraphView(rw.model)  # the view holds ``out``'s tensors too: it would keep them in memory
    if has_lazy_weights(model):
        out = spill(out)  # weights came from disk: the converted ones go back there until the save
    out.ir_version = max(out.ir_version, 4)  # IR 3 wants every initializer listed as an input; we add some
    _check_valid(out, model)
    if check_loads and (samples is None or not settings.check_accuracy):
        _check_loads(out, model)
    stats: tuple[OutputStats, ...] = ()
    problems: tuple[str, ...] = ()
    if samples is not None and settings.check_accuracy:
        stats, n = fp16_accuracy(model, out, rw.half_tensors, samples, progress=progress, total=total,
                                 top1=settings.thresholds.min_top1 is not None, reference_outputs=reference)
        n_samples = max(n_samples, n)
        problems = tuple(violations(list(stats), settings.thresholds))
    report = _report(rw.decisions, rw, folded, n_samples, measured, stats, problems, settings)
    result = Fp16Result(out, report, frozenset(rw.half_tensors))
    if problems:
        raise _refusal(model, result, stats, problems, samples if locate else None, settings, peak_map, say)
    return result


def _refusal(model: onnx.ModelProto, result: Fp16Result, stats: tuple[OutputStats, ...], problems: tuple[str, ...],
             samples: Iterable[Mapping[str, np.ndarray]] | None, settings: Fp16Settings,
             peaks: Mapping[str, float] | None, say: Callable[..., None]) -> Fp16AccuracyError:
    """The failed check's error: its violations, where the error starts, and the nodes to keep in FP32 as the
    hint (:mod:`~trtconv.precision.fp16_locate`; ``samples`` None: not searched)."""
    starts: tuple[ErrorStart, ...] = ()
    keep: tuple[str, ...] = ()
    checked: list[Mapping[str, np.ndarray]] = []
    if samples is not None:
        say("locate")
        checked = list(itertools.islice(samples, MAX_SAMPLES))
        few = checked[:LOCATE_SAMPLES]
        starts = error_starts(model, result.model, result.half_tensors, few,
                              threshold_for(settings.thresholds.min_cosine), fp16_inputs(result.model))

        def meets(nodes: tuple[str, ...], on: Sequence[Mapping[str, np.ndarray]]) -> bool:
            trial = replace(settings, exclude_nodes=settings.exclude_nodes + tuple(glob.escape(n) for n in nodes))
            try:
                convert_fp16(model, trial, on, peaks=peaks, check_loads=False, locate=False)
            except Fp16AccuracyError:
                return False
            return True

        keep = kept_in_fp32(starts, meets, few, checked)
        result = replace(result, report=replace(result.report, error_starts=starts, keep_fp32=keep))
    where = f"; the error starts at {'; '.join(s.describe() for s in starts)}" if starts else ""
    hint, retry = refusal_hint(keep, len(checked), _cosine_floor(stats, settings.thresholds), settings.exclude_nodes)
    return Fp16AccuracyError("FP16 model fails the accuracy check: " + violations_line(problems) + where, result,
                             hint=hint, retry=retry)


def _cosine_floor(stats: Sequence[OutputStats], thresholds: Thresholds) -> str | None:
    """The --min-cosine the model reached, rounded down, where a cosine below the limit is all that failed and
    it is a near miss (0.99 or more: further off, FP16 went wrong somewhere, and the hint must not wave it
    through); None otherwise (per-output limits: no one flag says them)."""
    if thresholds.min_cosine is None or thresholds.per_output:
        return None
    if violations(list(stats), replace(thresholds, min_cosine=None)):
        return None
    judged = [s.cosine for s in stats if thresholds.for_output(s.name) is not None]
    if not judged:
        return None
    reached = math.floor(min(judged) * 1e4) / 1e4
    return f"{reached:g}" if NEAR_MISS <= reached < thresholds.min_cosine else None


def _activation_peaks(
    work: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]] | None, settings: Fp16Settings,
    peaks: Mapping[str, float] | None, say: Callable[..., None],
) -> tuple[Mapping[str, float] | None, int, bool, list[dict[str, np.ndarray]] | None]:
    """(peak of a tensor, samples run, measured?, the FP32 outputs kept for the accuracy check).

    ``work`` is the input model (nodes sorted, nothing folded): the pass runs it on every sample, so its
    outputs are the accuracy check's reference as well. The types it needs are added for the pass and taken
    out again (the folds after it remove tensors those would describe)."""
    if peaks is not None and settings.max_activation is not None:
        return peaks, 0, True, None
    if samples is None or settings.max_activation is None:
        return None, 0, False, None
    reference: list[dict[str, np.ndarray]] = []
    say("peaks")
    given = [len(g.value_info) for g in iter_graphs(work.graph)]
    try:
        measured_peaks, n_samples = activation_peaks(_with_types(work), samples,
                                                     progress=lambda k: say("peaks", k), outputs=reference)
    finally:
        for g, n in zip(iter_graphs(work.graph), given):
            del g.value_info[n:]
    if sum(v.nbytes for r in reference for v in r.values()) > REFERENCE_KEEP_BYTES:
        return measured_peaks, n_samples, True, None  # cheaper to run the FP32 model again than to hold them
    return measured_peaks, n_samples, True, reference


def _count_by_graph(decisions: Iterable[Decision]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in decisions:
        out[d.graph] = out.get(d.graph, 0) + 1
    return out


def _check_loads(out: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """ONNX Runtime must load the FP16 model wherever it loads the FP32 one (else: our bug)."""
    try:
        ort.session(out)
    except InvalidModelError as exc:
        try:
            ort.session(original)
        except InvalidModelError as orig_exc:  # custom ops: nothing here can run it, before or after
            log.warning("ONNX Runtime cannot load the input model either (%s); the FP16 model was not run", orig_exc)
            return
        raise InternalError(f"ONNX Runtime refuses the FP16 model although it runs the FP32 one: {exc}") from exc


def _report(decisions: list[Decision], rw: Rewriter, folded, n_samples, measured, stats, problems, settings):
    kept = tuple(KeptNode(d.graph, d.name, d.op_type, d.rule or "", d.detail or "") for d in decisions if not d.fp16)
    return Fp16Report(
        float_nodes=len(decisions),
        converted=sum(d.fp16 for d in decisions),
        converted_by_graph=_count_by_graph(d for d in decisions if d.fp16),
        kept=kept,
        casts_inserted=rw.stats.casts,
        constants_converted=rw.stats.constants_converted,
        folded_batchnorms=folded,
        samples=n_samples,
        activation_check=measured,
        accuracy=stats,
        violations=problems,
        settings=settings,
    )


def _with_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """Types for every tensor we can know, subgraphs included (ONNX's inference; never fails): the inferred
    value infos (:func:`inferred_structure`) added to ``model`` in place, graph by graph."""
    inferred = inferred_structure(model)
    if inferred is None:
        return model
    for g, ig in zip(iter_graphs(model.graph), iter_graphs(inferred.graph)):
        known = {vi.name for vi in g.value_info}
        g.value_info.extend(vi for vi in ig.value_info if vi.name not in known)
    return model


def _check_valid(out: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """The converted model must pass onnx.checker wherever the original does (else: our bug)."""

    # The structure alone (kilobytes): the checker checks structure, not values, and the
    # whole model would be serialized once more for it.
    try:
        check_structure_only(out, None)
    except onnx.checker.ValidationError as exc:
        try:
            check_structure_only(original, None)
        except onnx.checker.ValidationError:
            log.warning("the input model fails onnx.checker too; the FP16 model inherits that")
            return
        raise InternalError(f"FP16 conversion produced an invalid model: {str(exc).splitlines()[0]}") from exc
