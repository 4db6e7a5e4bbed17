"""``trtconv build``: check → rewrite → precision → [TensorRT build] → verify, as one pipeline.

Every stage before the TensorRT build runs on the CPU, so the pipeline is useful
without TensorRT: it stops after writing the prepared ONNX (the explicit-precision,
rewritten graph TensorRT will parse) with TENSORRT_UNAVAILABLE, or on purpose with
``prepare_only``. Each stage is a function returning a frozen result; each thing is
computed once: the loaded model, its samples, the rewritten model, the graph ONNX
Runtime runs as the reference (:class:`Reference`) and that reference's outputs at the
profile corners (reused by verify). The stage functions are in
``build_stages.py``, what the run records in ``build_record.py``, the reference in ``reference_graph.py``.

"""

from __future__ import annotations

import datetime as _dt
import logging
import shlex
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trtconv.analyze import NodeReport
from trtconv.errors import (
    AccuracyError,
    BackendUnavailableError,
    BuildError,
    UsageError,
)
from trtconv.load import LAZY_WEIGHTS_BYTES, LoadedModel, files_sha256, load_model, model_sha256
from trtconv.onnxutil import iter_graphs, shape_value_inputs
from trtconv.outputs import note_for_crash
from trtconv.pipeline.build_identity import request_identity
from trtconv.pipeline.build_record import BuildOutcome, ProgressPhases, StageFn, StageRunner, Step
from trtconv.pipeline.build_settings import BuildSettings
from trtconv.pipeline.build_split import Split, head_of, split_hint, split_stage, write_tail
from trtconv.pipeline.build_stages import (
    Precisioned,
    check_stage,
    corners_stage,
    engine_stage,
    missed_rejections,
    precision_stage,
    recheck_stage,
    rewrite_stage,
    save_stage,
    verify_stage,
)
from trtconv.pipeline.quantize import (
    QuantizeAccuracyError,
    QuantizeSettings,
    QuantizeShareError,
    check_quantize_settings,
    sample_set,
)
from trtconv.pipeline.reference_graph import Reference
from trtconv.plan import (
    RTX_TARGET,
    BuildPlan,
    Profile,
    build_manifest,
    build_profiles,
    identity,
    manifest_path,
    plugin_fingerprints,
    validate_plan,
    write_manifest,
)
from trtconv.precision import cache_files
from trtconv.rewrites import RewriteResult, RewriteSettings
from trtconv.samples import SampleSet
from trtconv.trt import RTX_ALTERNATIVE, Flavour, for_target, tensorrt_version

log = logging.getLogger(__name__)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def build(model: Path, output: Path, settings: BuildSettings, target: str, *, force: bool = False,
          say: StageFn | None = None, progress: Any = None, outcome: BuildOutcome | None = None,
          command: str | None = None) -> BuildOutcome:
    """The whole pipeline for ``target`` (a ``--trt`` value). Raises a TrtconvError subclass on failure
    (its exit code is the verdict); pass ``outcome`` to see how far it got (stages, prepared ONNX)
    when it raises. ``command``: the command line hints repeat (the CLI's, with the user's options;
    None: one made from the settings)."""
    req = settings
    settings.contradictions()
    plan = settings.plan(model, output, target, force=force)
    validate_plan(plan)  # option consistency first: no model needed
    if req.precision == "int8" and not _has_samples(req.quantize_settings()):
        raise UsageError("--precision int8 needs --calib-data", hint="give a folder of .npy/.npz samples or images")
    if req.precision != "fp32":
        check_quantize_settings(req.quantize_settings())
    prepared = req.prepared_path(output)
    req.check_outputs(output, target, force=plan.force, model=model)  # every output, before minutes of work
    replacing = req.prepared is None and prepared.exists() and not plan.force
    outcome = outcome if outcome is not None else BuildOutcome(prepared=prepared)
    outcome.prepared = prepared
    outcome.snapshot(_written_paths(output, prepared, req))
    stages = StageRunner(outcome, say, on_start=lambda stage: _note_for_crash(stage, output, req, outcome))
    command = command or replace(req, trt=target).command_line(model, output)

    # Large weights stay on disk through rewrite, FP16, INT8 and the save (streamed into the
    # prepared ONNX).
    loaded = load_model(model, lazy_from=LAZY_WEIGHTS_BYTES)
    _refuse_requantizing(loaded, req.precision)
    hint = split_hint(loaded, target, command, req)  # the blocking ops are ones --split-tail moves to ONNX Runtime
    samples = sample_set(loaded.proto, req.quantize_settings())  # None: no sample data
    if samples is not None:
        next(iter(samples), None)  # names, shapes and dtypes of the data, before any heavy stage (exit 11)
    try:
        profiles = build_profiles(
            loaded.proto, shapes=req.shapes, min_shapes=req.min_shapes, opt_shapes=req.opt_shapes,
            max_shapes=req.max_shapes, required=not req.prepare_only, command=command,
            sample_shapes=None if samples is None else _sample_shapes(samples),
            sample_values=None if samples is None else _sample_values(samples, shape_value_inputs(loaded.proto)))
    except UsageError:
        check_stage(loaded, target, {}, hint, early=True)  # a model no shapes could build says so first (exit 5)
        raise
    plan = replace(plan, onnx_path=prepared, engine_path=output, profiles=profiles)
    shapes0 = profiles[0].corner("opt") if profiles else {}
    source = loaded  # the user's model, before --split-tail takes its head

    split = None
    if req.split_tail:
        split = stages.run("split", lambda: split_stage(loaded, req, target, req.tail_path(output), samples, shapes0))
        loaded = head_of(loaded, split)
    rewrite_settings = replace(req.rewrite_settings(target), proof_shapes=dict(shapes0))
    # a static profile: a model refused as it is may build folded with its shapes (like `rewrite --shapes`)
    checked = stages.run("check", lambda: check_stage(loaded, target, shapes0, hint, _if_static(profiles, rewrite_settings)))
    if not req.prepare_only and not req.keep_prepared:  # nothing would be kept: say so before minutes of work
        missing = _missing_tensorrt(for_target(target))
        if missing is not None:
            outcome.stopped = "tensorrt-unavailable"
            raise _no_tensorrt(missing, prepared, False, _rtx_command(req, model, output, command))
    if checked.fold:
        rewrite_settings = replace(rewrite_settings, shapes=dict(shapes0))
    rewritten = stages.run("rewrite", lambda: rewrite_stage(loaded, rewrite_settings))
    reference = Reference(loaded, rewritten, head=split is not None)
    precisioned = _precision(stages, outcome, rewritten, req, target, samples, reference, progress)
    if replacing:
        log.warning("replacing %s (derived from the model; --prepared PATH writes it elsewhere)", prepared)
    try:
        return _prepare_and_build(model, output, target, req, plan, outcome, stages, precisioned, reference,
                                  checked.verdict, profiles, progress, rewritten, shapes0, samples, split,
                                  hint or f"run `trtconv check --trt {target} {shlex.quote(str(model))}` for the reasons",
                                  checked.advice, lambda: model_sha256(source), command,
                                  lambda: _rtx_command(req, model, output, command))
    except BaseException as exc:
        _remove_failed_outputs(output, req, outcome, exc)
        _remove_new_caches(outcome)
        raise


def _precision(stages: StageRunner, outcome: BuildOutcome, rewritten: RewriteResult, req: BuildSettings, target: str,
               samples: SampleSet | None, reference: Reference, progress: Any) -> Precisioned:
    """The precision stage, its gate's verdict in ``outcome`` (also when it failed); a failure removes
    the calibration cache this run created."""
    phases = ProgressPhases(progress) if progress is not None else None
    if req.precision == "int8" and req.calib_cache and not req.no_calib_cache:
        outcome.new_caches += [p for p in cache_files(Path(req.calib_cache)) if not p.exists()]
    try:
        precisioned = stages.run("precision", lambda: precision_stage(rewritten.model, req, target, samples, reference, phases))
    except BaseException as exc:
        if isinstance(exc, QuantizeAccuracyError | QuantizeShareError):
            outcome.gate = exc.result
        _remove_new_caches(outcome)
        raise
    finally:
        if phases is not None:
            phases.close()
    outcome.gate = precisioned.gate
    return precisioned


def _remove_new_caches(outcome: BuildOutcome) -> None:
    """The calibration and timing caches a failed build created (never one that existed before it):
    a later build must not reuse scales or timings of a build that did not succeed."""
    for path in outcome.new_caches:
        try:
            path.unlink(missing_ok=True)
        except OSError as err:  # the original error is what the user must see
            log.warning("could not remove %s: %s", path, err)
    outcome.new_caches = []


def _note_for_crash(stage: str, output: Path, req: BuildSettings, outcome: BuildOutcome) -> None:
    """For the `trtconv` launcher, should this process crash in ``stage``: what a failed build removes, each
    file with its identity before the run (removed only if this run replaced it, as outcome.changed tells)."""
    files = _written_paths(output, outcome.prepared, req)
    if req.keep_prepared:
        files = files[:2]  # engine and manifest: the prepared ONNX (and a tail with it) is kept
    note_for_crash(stage, [*((p, outcome.before.get(p)) for p in files), *((p, None) for p in outcome.new_caches)])


def _failed_outputs(output: Path, req: BuildSettings, outcome: BuildOutcome) -> list[Path]:
    """What a build failing now must remove: engine and manifest once written, the prepared ONNX (and its
    .data, and a split tail that goes with it) unless ``keep_prepared``."""
    # A flag not yet set when a signal landed right after a rename: the file's changed identity tells.
    engine = outcome.engine is not None or any(outcome.changed(p) for p in (output, manifest_path(output)))
    doomed = [manifest_path(output), output] if engine else []
    if (outcome.written or outcome.changed(outcome.prepared)) and not req.keep_prepared:
        doomed += [outcome.prepared, outcome.prepared.with_name(outcome.prepared.name + ".data")]
        tail = outcome.tail or (req.tail_path(output) if req.split_tail else None)
        if tail is not None and (outcome.tail is not None or outcome.changed(tail)):  # it goes with its head
            doomed += [tail, tail.with_name(tail.name + ".data")]
    return doomed


def _remove_failed_outputs(output: Path, req: BuildSettings, outcome: BuildOutcome, exc: BaseException) -> None:
    """A failed build leaves nothing it wrote: engine, manifest, prepared ONNX (and its .data).
    Kept: everything when the engine's verification failed (exit 7: kept for inspection), and
    the prepared ONNX with ``keep_prepared`` (debugging, or building it elsewhere)."""
    if isinstance(exc, AccuracyError) and outcome.manifest is not None:
        return
    doomed = _failed_outputs(output, req, outcome)
    if outcome.prepared in doomed:
        outcome.tail = None
        outcome.written = False
    outcome.engine = None
    outcome.manifest = None
    for path in doomed:
        try:
            path.unlink(missing_ok=True)
        except OSError as err:  # the original error is what the user must see
            log.warning("could not remove %s: %s", path, err)


def _written_paths(output: Path, prepared: Path, req: BuildSettings) -> list[Path]:
    """Every file a build may write and a failed one removes: engine, manifest, prepared ONNX, tail."""
    paths = [output, manifest_path(output), prepared, prepared.with_name(prepared.name + ".data")]
    if req.split_tail:
        tail = req.tail_path(output)
        paths += [tail, tail.with_name(tail.name + ".data")]
    return paths


def _prepare_and_build(model: Path, output: Path, target: str, req: BuildSettings, plan: BuildPlan,
                       outcome: BuildOutcome, stages: StageRunner, precisioned: Precisioned, reference: Reference,
                       verdict: str, profiles: tuple[Profile, ...],
                       progress: Any, rewritten: RewriteResult,
                       shapes0: dict[str, tuple[int, ...]], samples: SampleSet | None,
                       split: Split | None, hint: str | None, advice: tuple[NodeReport, ...],
                       model_hash: Callable[[], str], command: str, rtx: Callable[[], str | None] = lambda: None
                       ) -> BuildOutcome:
    """From the prepared ONNX on: save (and the tail), recheck, profile corners, TensorRT build, verify,
    manifest. Over 80 lines: the stages in their order, each a line or two, with what they hand on."""
    prepared = outcome.prepared
    source = reference.loaded if split is None else None  # a head of --split-tail has no file of its own
    saved = stages.run("save", lambda: save_stage(precisioned.model, prepared, source))
    outcome.written = True
    # the model's hash: from the bytes the copy read, where the prepared ONNX is its copy (read once)
    onnx_sha = files_sha256([(model.name, saved.copied)]) if saved.copied else model_hash()
    if split is not None:
        write_tail(split)
        outcome.tail = split.tail_path
    disagreements = stages.run("recheck", lambda: recheck_stage(saved, target, shapes0, frozenset(req.skip_rule), hint,
                                                                rewritten.report.stepped_aside, advice,
                                                                profiles[0] if profiles else None, verdict))
    outcome.parser_disagreements = [d.to_json() for d in disagreements]
    flavour = for_target(target)
    missing = None if req.prepare_only else _missing_tensorrt(flavour)
    # verify (only where the engine runs here) reuses the reference's outputs at the corners
    keep = not req.prepare_only and not req.no_verify and flavour.inspects_engine
    corners = stages.run("profiles", lambda: corners_stage(reference, profiles, req, samples, keep,
                                                           builder_follows=not req.prepare_only and not missing))
    if req.prepare_only:
        outcome.stopped = "prepare-only"
        return outcome
    if missing is not None:
        outcome.stopped = "tensorrt-unavailable"
        raise _no_tensorrt(missing, prepared, req.keep_prepared, rtx()) from None  # asked only on this path
    try:
        built = stages.run("build", lambda: engine_stage(plan, progress, outcome.new_caches))
    except BuildError:  # a parser that rejects what check predicted it takes: recorded, then the error
        outcome.parser_disagreements += [d.to_json() for d in missed_rejections(saved, target, shapes0)]
        raise
    outcome.engine = output
    verify_json: dict[str, Any] | None = None
    if req.no_verify:  # said, like every skip: the engine was not run
        stages.run("verify", lambda: Step(None, {"reason": "--no-verify"}, "skipped"))
    elif not flavour.inspects_engine:
        reason = (f"{flavour.name} engines run only on RTX-class GPUs of the compute capabilities they were built "
                  f"for, and the build runs none (`trtconv verify {shlex.quote(str(output))} --onnx "
                  f"{shlex.quote(str(model))} --trt rtx` does, on such a GPU)")
        verify_json = dict(stages.run("verify", lambda: Step({"passed": None, "reason": reason},
                                                             {"reason": reason}, "skipped")))
    else:
        verify_json = dict(stages.run("verify", lambda: verify_stage(model, req, plan, reference, corners)))
    plugin_details = plugin_fingerprints(plan.plugin_libraries, built.extra.get("plugin_creators") or {})
    material = request_identity(model, req, target, plan, onnx_sha256=onnx_sha, plugins=plugin_details)
    layer_source = "engine" if flavour.inspects_engine else "network"
    manifest = build_manifest(
        plan,
        identity=identity(material),
        layers={"source": layer_source, "layers": list(built.extra.get("layers") or [])},
        bindings=list(built.extra.get("bindings") or []),
        plugin_details=plugin_details,
        onnx_sha256=onnx_sha,
        environment=dict(built.environment),
        source_onnx=model.name,
        rewrites=rewritten.report.to_json().get("rewrites", []),
        rewrites_stepped_aside=[a.to_json() for a in rewritten.report.stepped_aside],
        parser_disagreements=outcome.parser_disagreements,
        rewrite_drift=None if rewritten.report.drift is None else rewritten.report.drift.to_json(),
        dtype_changes=[c.to_json() for c in rewritten.report.dtype_changes],
        precision={**precisioned.summary, "achieved": dict(built.precision)},
        calibration=None if precisioned.calibration is None else dict(precisioned.calibration),
        plugins_needed=list(built.plugins_needed),
        build_seconds=built.seconds,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        engine_sha256=built.engine_sha256,
        verify=verify_json,
        split=None if split is None else split.manifest(),
        command=command + req.shape_flags(),
    )
    write_manifest(manifest_path(output), manifest, force=True)
    outcome.manifest = manifest
    if verify_json is not None and verify_json.get("passed") is False:
        raise AccuracyError(
            "the engine's outputs differ from ONNX Runtime beyond the thresholds: "
            + "; ".join(verify_json.get("failures", [])[:3]),
            hint=f"the engine and {manifest_path(output).name} were kept for inspection; "
            "`trtconv verify` shows per-output statistics",
        )
    return outcome


def _missing_tensorrt(flavour: Flavour) -> BackendUnavailableError | None:
    """Why the TensorRT of ``flavour`` cannot build here, or None when it can."""
    try:
        tensorrt_version(flavour)
    except BackendUnavailableError as exc:
        return exc
    return None


def _rtx_command(req: BuildSettings, model: Path, output: Path, command: str) -> str | None:
    """``command`` (the one hints repeat, with its shape flags) building with TensorRT-RTX instead, runnable as
    printed; None where it would be refused (--plugins, --hardware-compat, ...; a Triton repository, which
    Triton cannot serve from an RTX plan)."""
    try:
        validate_plan(replace(req, trt=RTX_TARGET).plan(model, output, RTX_TARGET))
    except UsageError:
        return None
    words = shlex.split(command + req.shape_flags())
    if "--triton-repo" in words:
        return None
    if "--trt" in words[:-1]:
        words[words.index("--trt") + 1] = RTX_TARGET
    else:
        words += ["--trt", RTX_TARGET]
    return shlex.join(words)


def _no_tensorrt(exc: BackendUnavailableError, prepared: Path, kept: bool, rtx: str | None
                 ) -> BackendUnavailableError:
    """Exit 9: before any stage when nothing would be kept, or after the CPU stages with ``--keep-prepared``
    (then where the prepared ONNX is). ``rtx``: the same command with TensorRT-RTX, offered where it would run."""
    install = (exc.hint or "").replace(RTX_ALTERNATIVE, "").rstrip(".")
    offered = rtx is not None and RTX_ALTERNATIVE in (exc.hint or "")  # the hint says RTX is installed
    alternative = f"; or build with the TensorRT-RTX that is installed: `{rtx}`" if offered else ""
    trtexec = ("trtexec --stronglyTyped (TensorRT 10; 11 is always strongly typed): the precision is already "
               "explicit, no --fp16/--int8 flags needed")
    if kept:
        return BackendUnavailableError(
            f"{exc.message}; stopped after the precision stage: the prepared ONNX is {prepared}",
            hint=f"{install}, then run this command again{alternative}; or build {prepared} with {trtexec}")
    return BackendUnavailableError(
        f"{exc.message}; stopped after check (nothing was written)",
        hint=f"{install}, then run this command again{alternative}; or add --prepare-only (or --keep-prepared) "
        f"to keep the prepared ONNX and build it with {trtexec}")


def _if_static(profiles: tuple[Profile, ...], settings: RewriteSettings) -> RewriteSettings | None:
    """``settings`` where one profile gives each dynamic input a single shape (``--shapes``: nothing in
    the engine varies, so the graph may be folded with it), else None."""
    static = len(profiles) == 1 and bool(profiles[0].inputs) and all(
        r.min == r.opt == r.max for _, r in profiles[0].inputs)
    return settings if static else None


def _refuse_requantizing(loaded: LoadedModel, precision: str) -> None:
    """INT8 over a model that already holds Q/DQ would quantize it twice."""
    if precision != "int8":
        return
    qdq = sum(1 for g in iter_graphs(loaded.proto.graph) for n in g.node if n.op_type in QDQ_OPS)
    if qdq:
        raise UsageError(
            f"{loaded.path.name} already holds {qdq} QuantizeLinear/DequantizeLinear node(s): it is quantized, "
            "and --precision int8 would add a second set of Q/DQ around them",
            hint="build it as it is with --precision fp32: TensorRT runs explicit Q/DQ in INT8 either way",
        )


def _has_samples(settings: QuantizeSettings) -> bool:
    return bool(settings.calib_data or settings.calib_loader or settings.random_data)


def _sample_values(samples: SampleSet, names: tuple[str, ...]) -> Iterator[dict[str, tuple[int, ...]]]:
    """Each sample's values of the shape-tensor inputs (``names``), flattened; nothing without such inputs."""
    if not names:
        return iter(())
    return ({n: tuple(int(v) for v in np.asarray(sample[n]).reshape(-1)) for n in names if n in sample}
            for sample in samples)


def _sample_shapes(samples: SampleSet) -> Iterator[dict[str, tuple[int, ...]]]:
    """Each sample's input shapes, read only if a default profile needs them."""
    return ({name: tuple(int(d) for d in array.shape) for name, array in sample.items()} for sample in samples)
