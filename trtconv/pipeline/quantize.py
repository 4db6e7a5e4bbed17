"""``quantize`` as one pipeline: samples -> FP16 or INT8 pass -> accuracy check -> save.

Lives in the pipeline layer because it composes load, samples and precision; ``trtconv.api``
re-exports it and ``trtconv.pipeline.build`` reuses its settings and sample selection.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtconv.errors import AccuracyError, PrecisionNotAchievedError, UsageError, WithResult
from trtconv.load import LAZY_WEIGHTS_BYTES, load_model, save_model
from trtconv.onnxutil import index_limits, length_inputs
from trtconv.outputs import check_not_the_model, check_output_path
from trtconv.precision import (
    DEFAULT_MAX_ACTIVATION,
    DEFAULT_TRT_VERSION,
    FP16_MAX,
    REMAINDER_FP16,
    Fp16AccuracyError,
    Fp16Settings,
    Int8AccuracyError,
    Int8Result,
    Int8Settings,
    Int8ShareError,
    convert_fp16,
    quantize_int8,
    samples_needed,
    too_few_samples,
)
from trtconv.reference import DEFAULT_THRESHOLDS, Thresholds, parse_limit, thresholds_with
from trtconv.samples import (
    ImagePreprocess,
    SampleSet,
    SampleSource,
    Split,
    model_inputs,
    preprocess_warnings,
    split_samples,
)
from trtconv.settings import declared

if TYPE_CHECKING:
    import onnx

    from trtconv.precision import Fp16Report, Int8Report
    from trtconv.samples import SampleSet, SampleSource

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

INT8_JUDGING_SHARE = 0.4  # of the samples, judged (at least the claim's need, at most half)
INT8_SELECTION_SHARE = 0.2  # of the samples, for choosing (method, smoothing, bias correction, exclusions)
QUANTIZE_SCHEMA = "trtconv.quantize/1"
GATE_LIMITS = ("max_abs", "max_rel", "min_cosine", "min_top1")
# the INT8 verdict's fields ``quantize --json`` and a build's precision gate carry at the top level
INT8_GATE_KEYS = ("held_out_samples", "worst_samples", "weak", "unverified", "claim", "samples_per_part",
                  "int8_share", "share_needed_below", "verdict")


def _d(name: str) -> Any:
    """The declared default (one place: trtconv.settings)."""
    return declared(name).default


@dataclass(frozen=True)
class QuantizeSettings:
    """``trtconv quantize``'s settings, one field per declared setting (the names ``BuildSettings`` uses).

    Sample data: at most one of calib_data, calib_loader, random_data. The gate is the precision's
    defaults with max_abs/max_rel/min_cosine/min_top1 on top (each "X" or "OUTPUT=X"): :meth:`gate`.
    """

    precision: Literal["fp16", "int8"] = "fp16"
    calib_data: Path | None = None  # folder or file of .npy/.npz samples, or images
    preprocess: str | None = None  # image preprocessing spec, e.g. "preset=ppocr-cls"
    calib_loader: Path | None = None  # Python file defining samples(inputs); runs that code
    random_data: int | None = None  # N seeded random samples (smoke tests only)
    max_samples: int = _d("max_samples")  # 0: all
    held_out: int | float | None = None  # int8: samples to judge on (None: 40%, >= the claim's need, <= half)
    exclude: tuple[str, ...] = ()  # node-name globs kept in FP32 (int8: also op types)
    exclude_op: tuple[str, ...] = ()  # op types kept in FP32
    keep_io_types: bool = _d("keep_io_types")  # fp16: float32 inputs/outputs stay float32
    max_activation: float | None = None  # fp16: None = default (4096); 0 = off
    max_initializer: float | None = None  # fp16: None = default (65504); 0 = off
    no_fold_batchnorm: bool = _d("no_fold_batchnorm")
    calib_method: Literal["entropy", "percentile", "minmax", "mse", "auto"] = _d("calib_method")
    percentile: float = _d("percentile")
    calib_cache: Path | None = None
    no_calib_cache: bool = _d("no_calib_cache")  # ignore calib_cache (recalibrate)
    int8_remainder: Literal["fp16", "fp32"] = _d("int8_remainder")  # int8: precision outside the Q/DQ pairs
    auto_exclude: bool = _d("auto_exclude")  # int8: keep the fewest layers out of INT8 until the gate passes
    sensitivity: bool = _d("sensitivity")  # int8: report every quantized layer's own error
    auto_per_tensor: bool = _d("auto_per_tensor")  # int8 auto: also try the per-tensor mix
    no_bias_correction: bool = _d("no_bias_correction")  # int8 auto: do not try bias correction
    no_smoothing: bool = _d("no_smoothing")  # int8 auto: do not try SmoothQuant-style migration
    int8_unverified: bool = _d("int8_unverified")  # int8: build although the judged samples cannot support the claim
    split_seed: int = _d("split_seed")  # int8: the seed of the calibration / selection / judging draw
    sources: Literal["folders", "files"] = _d("sources")  # what a subfolder of calib_data is: one source, or a folder
    max_abs: tuple[str | float, ...] = ()  # gate limits, each X or "OUTPUT=X"; none: the precision's defaults
    max_rel: tuple[str | float, ...] = ()
    min_cosine: tuple[str | float, ...] = ()  # default: int8 0.99, fp16 0.999
    min_top1: tuple[str | float, ...] = ()
    gate_output: tuple[str, ...] = ()  # gate only these outputs
    allow_nonfinite: bool = _d("allow_nonfinite")
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # int8 --auto-exclude: keep at least this share of Conv/MatMul/Gemm in INT8 (exit 8 as soon as it cannot)
    min_precision_share: float = _d("min_precision_share")

    def gate(self) -> Thresholds:
        """The accuracy limits in force: the precision's defaults with the given limits on top."""
        return gate_thresholds(self.precision, {f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class QuantizeResult:
    model: onnx.ModelProto
    settings: QuantizeSettings
    report: Fp16Report | Int8Report
    source: SampleSource | None  # where the samples came from
    samples: int | None  # how many fed calibration / activation ranges
    output: Path | None = None  # where the model was written, if it was

    @property
    def accuracy_check(self) -> str:
        """On what the gate judged: "held-out data", "calibration data", "sample data", "random data", "not checked"."""
        if not self.report.accuracy:
            return "not checked"
        if self.source is not None and self.source.kind == "random":
            return "random data"
        if self.settings.precision == "fp16":
            return "sample data"
        return "held-out data" if getattr(self.report, "checked_on", None) == "held-out" else "calibration data"

    @property
    def passed(self) -> bool | None:
        """False: the gate failed. True: it passed on real data the model was not fitted to (int8: the judged
        samples support the claim). None: not checked, or unverified."""
        if self.report.violations:
            return False
        if self.accuracy_check == "sample data":
            return True
        return self.report.passed if self.accuracy_check == "held-out data" else None

    def to_json(self) -> dict[str, Any]:
        """The ``trtconv quantize --json`` report (schema trtconv.quantize/1), minus the paths."""
        r = self.report.to_json()
        is_fp16 = self.settings.precision == "fp16"
        samples: dict[str, Any] = {"source": self.source.to_json() if self.source else None, "count": self.samples}
        if not is_fp16:
            samples["accuracy_samples"] = r.get("accuracy_samples")
        return {"schema": QUANTIZE_SCHEMA, "precision": self.settings.precision, "samples": samples,
                "fp16": r if is_fp16 else None, "int8": None if is_fp16 else r,
                "accuracy": r.get("accuracy", []), "thresholds": self.settings.gate().to_json(),
                "violations": list(self.report.violations), "accuracy_check": self.accuracy_check,
                "checked": self.passed is not None, "passed": self.passed, "written": self.output is not None,
                **({} if is_fp16 else {k: r[k] for k in INT8_GATE_KEYS})}


def _patterns(values: Sequence[str]) -> tuple[str, ...]:
    """``("a,b", "c")`` -> ("a", "b", "c"): the CLI's repeatable, comma-separated lists."""
    return tuple(p.strip() for v in values for p in v.split(",") if p.strip())


def _limits(flag: str, values: tuple[str | float, ...]) -> list[tuple[str | None, float]]:
    out = []
    for v in values:
        try:
            out.append(parse_limit(str(v)))
        except ValueError as exc:
            raise UsageError(f"--{flag.replace('_', '-')} {v!r}: expected a number or OUTPUT=NUMBER",
                             hint="e.g. --min-cosine 0.995 or --min-cosine scores=0.995") from exc
    return out


def gate_thresholds(precision: str, params: Mapping[str, Any]) -> Thresholds:
    """The gate the settings ask for: the precision's defaults with the given limits on top."""
    overrides = {k: _limits(k, tuple(params.get(k) or ())) for k in GATE_LIMITS}
    only = [p.strip() for v in params.get("gate_output") or () for p in v.split(",") if p.strip()]
    return thresholds_with(DEFAULT_THRESHOLDS[precision], overrides,
                           allow_nonfinite=bool(params.get("allow_nonfinite")), only=only)


def check_quantize_settings(settings: QuantizeSettings) -> None:
    """Contradictions in the settings, found before anything is read (flag names as the CLI spells them)."""
    if settings.precision not in ("fp16", "int8"):
        raise UsageError(f"unknown precision {settings.precision!r}", hint="choose fp16 or int8")
    settings.gate()  # a malformed limit ("--min-cosine high") is a usage error here
    given = [f for f, v in (("--calib-data", settings.calib_data), ("--calib-loader", settings.calib_loader),
                            ("--random-data", settings.random_data)) if v]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} are mutually exclusive", hint="give one source of samples")
    if settings.preprocess and not settings.calib_data:
        raise UsageError("--preprocess applies to image folders given with --calib-data")
    if settings.precision == "fp16":
        wrong = [f for f, v in (("--sensitivity", settings.sensitivity),  # --auto-exclude is on by default
                                ("--int8-remainder fp32", settings.int8_remainder == "fp32")) if v]
        if wrong:
            raise UsageError(f"{wrong[0]} applies to --precision int8 only")
    if settings.precision == "int8" and not given:
        raise UsageError("int8 needs calibration data",
                         hint="pass --calib-data DIR (or --random-data N to smoke-test)")


def check_gate_outputs(proto: onnx.ModelProto, gate: Thresholds) -> None:
    """Output names in per-output limits or --gate-output must be the model's (a typo would gate nothing)."""
    names = [o.name for o in proto.graph.output]
    unknown = sorted(gate.outputs_named() - set(names))
    if unknown:
        raise UsageError(f"no output named {unknown[0]!r} in the model (thresholds name {', '.join(unknown)})",
                         hint=f"the outputs are: {', '.join(names)}")


def sample_set(proto: onnx.ModelProto, settings: QuantizeSettings) -> SampleSet | None:
    """The samples ``settings`` name, bound to the model's inputs (None: no sample data)."""

    if settings.calib_data:
        pp = ImagePreprocess.parse(settings.preprocess) if settings.preprocess else None
        source = SampleSource.detect(settings.calib_data, pp, limit=settings.max_samples, sources=settings.sources)
        inputs = model_inputs(proto)
        if source.kind == "images" and len(inputs) == 1:  # what the images become, where the user did not say
            for warning in preprocess_warnings(pp, next(iter(inputs.values())).dims, str(settings.calib_data)):
                log.warning("%s", warning)
    elif settings.calib_loader:
        source = SampleSource.loader(settings.calib_loader, limit=settings.max_samples)
    elif settings.random_data:
        n = min(settings.random_data, settings.max_samples) if settings.max_samples else settings.random_data
        source = SampleSource.random(n, seed=0, shapes=settings.shapes, limits=index_limits(proto),
                                     lengths=length_inputs(proto))  # values the graph takes, as proofs draw them
    else:
        return None
    return SampleSet(source, model_inputs(proto))


def int8_parts(samples: SampleSet, settings: QuantizeSettings) -> Split:
    """The samples drawn at random, a source at a time, into calibration, selection and judging parts.

    Judging: ``--held-out`` (a count or a fraction); by default 40 %, at least the judged samples a pass needs
    (:func:`samples_needed`), at most half. Selection: 20 % when something is chosen (``--calib-method auto`` or
    auto-exclude), else none. The rest calibrates.
    """
    n = len(samples)
    needed = samples_needed()
    held = settings.held_out
    if held is None:
        judging = min(max(needed, math.ceil(INT8_JUDGING_SHARE * n)), n // 2)
    elif isinstance(held, float) and 0 < held < 1:
        judging = math.ceil(held * n)
    else:
        judging = int(held)
    if judging >= n and n > 1:
        raise UsageError(f"cannot judge on {judging} of {n} samples", hint="need at least one sample to calibrate on")
    chooses = settings.calib_method == "auto" or settings.auto_exclude
    selection = math.ceil(INT8_SELECTION_SHARE * n) if chooses else 0
    return split_samples(samples, max(judging, 0), selection, settings.split_seed)


def samples_for_claim(settings: QuantizeSettings) -> int:
    """How many samples the default draw needs for its judging part to support the claim."""
    needed = samples_needed()
    held = settings.held_out
    if isinstance(held, float) and 0 < held < 1:
        return math.ceil(needed / held)
    if held:
        return needed + 1
    return 2 * needed


def fp16_settings(settings: QuantizeSettings, *, remainder: bool = False) -> Fp16Settings:
    """The FP16 rules the flags ask for (``remainder``: for INT8's FP16 remainder, no fold or check of its own)."""
    base = REMAINDER_FP16 if remainder else Fp16Settings()
    return replace(
        base, keep_io_types=settings.keep_io_types,
        fold_batchnorm=False if remainder else not settings.no_fold_batchnorm,
        max_initializer=_limit(settings.max_initializer, FP16_MAX),
        max_activation=_limit(settings.max_activation, DEFAULT_MAX_ACTIVATION),
        exclude_ops=frozenset(() if remainder else _patterns(settings.exclude_op)),
        exclude_nodes=() if remainder else _patterns(settings.exclude),
        thresholds=settings.gate(),
    )


def int8_settings(settings: QuantizeSettings, *, trt_version: str = DEFAULT_TRT_VERSION) -> Int8Settings:
    """The INT8 stage's settings for the flags: one mapping for ``quantize`` and ``build``."""
    return Int8Settings(
        method=settings.calib_method, percentile=settings.percentile,
        exclude=_patterns(settings.exclude) + _patterns(settings.exclude_op),
        cache_path=settings.calib_cache, use_cache=not settings.no_calib_cache, thresholds=settings.gate(),
        trt_version=trt_version, remainder=settings.int8_remainder, fp16=fp16_settings(settings, remainder=True),
        fold_batchnorm=not settings.no_fold_batchnorm, auto_exclude=settings.auto_exclude, sensitivity=settings.sensitivity,
        min_share=settings.min_precision_share, auto_per_tensor=settings.auto_per_tensor,
        auto_bias_correction=not settings.no_bias_correction, auto_smoothing=not settings.no_smoothing,
    )


def run_int8(proto: onnx.ModelProto, samples: SampleSet, settings: QuantizeSettings, *,
             model_path: Path | None = None, calibration_model: onnx.ModelProto | None = None,
             trt_version: str = DEFAULT_TRT_VERSION, progress: Callable[[str, int, int | None], None] | None = None,
             warn: Callable[[str], None] | None = None) -> Int8Result:
    """Draw the parts, calibrate, choose, judge: the INT8 path ``quantize`` and ``build --precision int8`` share.

    Too few judging samples for the claim: :class:`Int8EvidenceError` (exit 11) before any work, unless
    ``int8_unverified`` (random data is never judged for the claim). Raises :class:`QuantizeAccuracyError`
    (exit 7) and :class:`QuantizeShareError` (exit 8), each with ``.result`` holding the report.
    """
    split = int8_parts(samples, settings)
    judging = split.judging
    unverified = settings.int8_unverified or samples.source.kind == "random"
    judged = len(judging) if judging is not None else 0
    if judged < samples_needed() and not unverified:
        _read_every_sample(samples)
        raise too_few_samples(judged, samples_needed(), len(samples), samples_for_claim(settings))
    sources = len(set(judging.groups())) if judging is not None else 0
    if sources < min(judged, samples_needed()) and not unverified:
        # a source counts once at most in the claim (precision/int8/claim.py): known before any work
        _read_every_sample(samples)
        raise too_few_samples(sources, samples_needed(), counted=(
            f"judged sources ({judged} samples from {sources} sources: a source counts once at most)"))
    if judging is None and warn is not None:
        warn(f"{len(samples)} sample(s) in {split.groups} source(s): none to judge on, so the accuracy check runs on "
             "the calibration data and the result is unverified")
    int8 = replace(int8_settings(settings, trt_version=trt_version), unverified=unverified)
    try:
        return quantize_int8(proto, int8, split.calibration, model_path=model_path,
                             eval_samples=judging if judging is not None else split.calibration,
                             select_samples=split.selection, calibration_model=calibration_model, progress=progress,
                             eval_held_out=judging is not None)
    except Int8AccuracyError as exc:
        failed = QuantizeResult(exc.result.model, settings, exc.result.report, samples.source,
                                exc.result.report.calibration_runs or None)
        raise QuantizeAccuracyError.of(exc, failed) from exc
    except Int8ShareError as exc:
        failed = QuantizeResult(exc.result.model, settings, exc.result.report, samples.source,
                                exc.result.report.calibration_runs or None)
        raise QuantizeShareError.of(exc, failed) from exc


def _read_every_sample(samples: SampleSet) -> None:
    """Read each sample once before a refusal for too few: a file that cannot be read is what the user
    must fix first (said after they had gathered more data, it would cost them a second round)."""
    for _ in samples:
        pass


def _limit(value: float | None, default: float) -> float | None:
    if value is None:
        return default
    return None if value <= 0 else value


class QuantizeAccuracyError(WithResult, AccuracyError):
    """Accuracy outside the thresholds; nothing was written, ``result`` holds the model and the report."""

    result: QuantizeResult


class QuantizeShareError(WithResult, PrecisionNotAchievedError):
    """INT8 cannot pass the gate within ``--min-precision-share`` (exit 8); nothing was written, ``result`` holds
    the report (the per-layer sensitivity behind the refusal, the share the gate would need)."""

    result: QuantizeResult


def quantize(model: PathLike, output: PathLike | None = None, settings: QuantizeSettings | None = None, *,
             force: bool = False, progress: Callable[[str, int, int | None], None] | None = None,
             warn: Callable[[str], None] | None = None, step: Callable[[str], None] | None = None
             ) -> QuantizeResult:
    """FP16 or INT8 made explicit in the ONNX, checked against FP32 with ONNX Runtime; save to ``output``.

    Gate limits in ``settings`` (max_abs ... min_top1, gate_output; else the precision's defaults) raise :class:`QuantizeAccuracyError` (AccuracyError,
    exit 7; ``exc.result`` holds the report) and nothing is written. Optional callbacks:
    ``progress(stage, done, total)`` for bars, ``warn(text)`` for warnings, ``step(name)``
    before "load" and "save".
    """

    settings = settings or QuantizeSettings()
    say = step or (lambda _name: None)
    check_quantize_settings(settings)
    if output is not None:
        check_not_the_model(Path(output), model, "-o", f".{settings.precision}.onnx")  # never overwritten, --force or not
        check_output_path(Path(output), force=force)
    say("load")
    # FP16 and INT8 read each weight where they convert it: the large ones stay on disk until then.
    loaded = load_model(model, lazy_from=LAZY_WEIGHTS_BYTES)
    if loaded.checker_error and warn is not None:
        warn(f"onnx.checker: {loaded.checker_error}")
    check_gate_outputs(loaded.proto, settings.gate())
    samples = sample_set(loaded.proto, settings)
    source = samples.source if samples is not None else None
    report: Fp16Report | Int8Report
    count: int | None
    if settings.precision == "fp16":

        if samples is None and warn is not None:
            warn("no sample data: the activation-range rule and the accuracy check are skipped "
                 "(pass --calib-data DIR, or --random-data N for a smoke test)")
        try:
            fp16 = convert_fp16(loaded.proto, fp16_settings(settings), samples, progress=progress)
        except Fp16AccuracyError as exc:
            failed = QuantizeResult(exc.result.model, settings, exc.result.report, source, exc.result.report.samples)
            raise QuantizeAccuracyError.of(exc, failed) from exc
        result_model, report, count = fp16.model, fp16.report, fp16.report.samples
    else:

        assert samples is not None
        int8 = run_int8(loaded.proto, samples, settings, model_path=Path(model), progress=progress, warn=warn)
        result_model, report, count = int8.model, int8.report, int8.report.calibration_runs or None
    if output is not None:
        say("save")
        save_model(result_model, output, force=force)
    return QuantizeResult(result_model, settings, report, source, count, Path(output) if output is not None else None)
