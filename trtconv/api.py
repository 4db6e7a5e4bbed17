"""The pipeline as Python functions: what the CLI commands do, minus the printing.

Each function takes paths and one frozen settings object, returns the stage's typed
report, and raises the same :mod:`trtconv.errors` exceptions the CLI turns into exit
codes (``exc.exit_code``), so a script and a Makefile see the same verdicts.
Examples (run as tests) are in docs/api.md.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtconv.analyze import analyze, compare_live
from trtconv.errors import UsageError
from trtconv.load import approx_size, load_model, parse_shapes, save_model
from trtconv.outputs import check_output_path
from trtconv.pipeline import (
    BuildRequest,
    QuantizeAccuracyError,
    QuantizeResult,
    QuantizeSettings,
    not_the_input,
    quantize,
    request_identity,
    run_build,
)
from trtconv.plan import (
    DEFAULT_MIN_PRECISION_SHARE,
    DEFAULT_OPT_LEVEL,
    BuildPlan,
    TimingCacheChoice,
    identity_hash,
    manifest_path,
    parse_compute_capabilities,
    parse_memory_pools,
    parse_size,
)
from trtconv.rewrites import RewriteSettings
from trtconv.rewrites import rewrite as rewrite_model
from trtconv.trt import RTX_MODULE, run_isolated

if TYPE_CHECKING:
    from trtconv.analyze import CheckReport
    from trtconv.pipeline import BuildOutcome, BuildRequest
    from trtconv.rewrites import RewriteResult, RewriteSettings

PathLike = str | os.PathLike[str]
ShapesArg = Mapping[str, Sequence[int]] | str | None

DEFAULT_TRT_VERSION = "11.4"  # the CLI's --trt default (trtconv.cli.options)

__all__ = ["BuildSettings", "QuantizeAccuracyError", "QuantizeResult", "QuantizeSettings", "build", "check",
           "quantize", "rewrite"]


def _shapes(shapes: ShapesArg) -> dict[str, tuple[int, ...]]:
    """``"x:1x3x224x224"`` (the CLI's form) or ``{"x": (1, 3, 224, 224)}``."""

    if shapes is None or isinstance(shapes, str):
        return parse_shapes(shapes)
    return {str(k): tuple(int(d) for d in v) for k, v in shapes.items()}


# --------------------------------------------------------------------------- check


def check(model: PathLike, *, trt: str = DEFAULT_TRT_VERSION, shapes: ShapesArg = None,
          live: bool = False) -> CheckReport:
    """What TensorRT ``trt``'s ONNX parser will reject in ``model``, node by node.

    ``report.verdict`` is "supported", "needs-rewrite" or "unsupported"; ``report.exit_code``
    is what ``trtconv check`` would exit with. Weights are not loaded: a 10 GB model costs
    no more than its graph. ``live=True`` also runs the real parser where that TensorRT is
    installed (``tensorrt_rtx`` for ``trt="rtx"``, with a CPU-only build; ``tensorrt`` otherwise,
    parse only), in a child process, and puts its answer in ``report.live``.
    """

    shape_map = _shapes(shapes)  # usage errors before reading a large file
    report = analyze(load_model(model, structure_only=True), trt, shape_map)
    return _with_live(report, Path(model), trt, shape_map) if live else report


def _with_live(report: CheckReport, path: Path, trt: str, shapes: Mapping[str, Sequence[int]]) -> CheckReport:
    module = RTX_MODULE if trt == "rtx" else "tensorrt"
    if importlib.util.find_spec(module) is None:
        note = f"--live: {module} is not installed, so this is the prediction only"
        return replace(report, warnings=(*report.warnings, note))
    return compare_live(report, run_isolated(path, module, build=module == RTX_MODULE, shapes=shapes))


# --------------------------------------------------------------------------- rewrite


def rewrite(model: PathLike, output: PathLike | None = None, settings: RewriteSettings | None = None, *,
            force: bool = False, step: Callable[[str], None] | None = None) -> RewriteResult:
    """Rewrite ``model`` for TensorRT, every rewrite proven with ONNX Runtime; save to ``output`` if given.

    Raises AccuracyError (exit 7) if a proof fails; nothing is written then. The output
    keeps its weights in ``<output>.data`` when the input had external data or the result
    is large. ``step(name)`` is called after "load", "rewrite" and "save" (progress).
    """

    settings = settings or RewriteSettings()
    say = step or (lambda _name: None)
    if output is not None:
        check_output_path(Path(output), force=force)  # fail before the work, not after
        not_the_input(model, output)
    loaded = load_model(model, lazy_from=settings.lazy_weights_bytes)
    say("load")
    result = rewrite_model(loaded, settings)
    say("rewrite")
    if output is not None:
        external = bool(loaded.external_refs) or approx_size(result.model) > settings.large_model_bytes
        save_model(result.model, output, force=force, external_data=True if external else None)
        say("save")
    return result


# --------------------------------------------------------------------------- build


@dataclass(frozen=True)
class BuildSettings:
    """``trtconv build``'s flags as one value; :meth:`request` turns them into the pipeline's request."""

    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    calib_data: Path | None = None  # required for int8, optional for fp16
    calib_limit: int = 0
    shapes: str | None = None  # one profile, min = opt = max ("x:1x3x640x640")
    min_shapes: tuple[str, ...] = ()  # one entry per profile
    opt_shapes: tuple[str, ...] = ()
    max_shapes: tuple[str, ...] = ()
    workspace: str | None = None  # e.g. "4G"
    memory_pools: tuple[str, ...] = ()  # "POOL:SIZE"
    timing_cache: Path | None = None  # None: one per GPU and TensorRT version under ~/.cache/trtconv
    use_timing_cache: bool = True
    opt_level: int = DEFAULT_OPT_LEVEL
    hardware_compat: Literal["none", "ampere+", "same-cc"] = "none"
    compute_capabilities: tuple[str, ...] = ()  # trt="rtx": e.g. ("8.6", "8.9"); () = RTX's portable set
    version_compatible: bool = False
    exclude_lean_runtime: bool = False
    plugins: tuple[Path, ...] = ()  # TensorRT plugin libraries to load
    min_precision_share: float = DEFAULT_MIN_PRECISION_SHARE  # fp16/int8: fail (exit 8) below this share of layers
    dcn_target: str | None = None
    skip_rules: tuple[str, ...] = ()  # built-in rewrite rules not to apply (--skip-rule)
    prepared: Path | None = None  # default: ENGINE stem + .prepared.onnx
    prepare_only: bool = False  # stop after the prepared ONNX (no TensorRT needed)
    keep_prepared: bool = False  # a failed build keeps the prepared ONNX (else it leaves nothing)
    verify: bool = True
    preflight: bool = True  # run the graph at every profile corner on ONNX Runtime before TensorRT
    seed: int = 0
    trt: str = DEFAULT_TRT_VERSION  # a TensorRT version ("10.16", "11.4") or "rtx" for TensorRT-RTX
    # fp16/int8: samples, exclusions, INT8 options and the accuracy gate as ``quantize`` takes them;
    # None: quantize's defaults over calib_data / calib_limit
    quantize: QuantizeSettings | None = None
    # the command line hints repeat (the CLI's, with the user's options; None: one made from these settings)
    command: str | None = None

    def outputs(self, output: PathLike) -> list[Path]:
        """The files a build writes: the prepared ONNX, then (unless prepare_only) manifest and engine."""

        engine = Path(output)
        files = [BuildRequest(model=engine, output=engine, prepared=self.prepared).prepared_path()]
        return files if self.prepare_only else [*files, manifest_path(engine), engine]

    def request(self, model: PathLike, output: PathLike, *, force: bool = False) -> BuildRequest:

        if self.timing_cache and not self.use_timing_cache:
            raise UsageError("--timing-cache and --no-timing-cache contradict each other")
        pools = list(self.memory_pools) + ([f"workspace:{parse_size(self.workspace)}"] if self.workspace else [])
        plan = BuildPlan(
            onnx_path=Path(model),  # replaced by the prepared ONNX's path
            engine_path=Path(output),
            memory_pools=parse_memory_pools(pools),
            timing_cache=TimingCacheChoice(path=self.timing_cache, enabled=self.use_timing_cache),
            optimization_level=self.opt_level,
            hardware_compat=self.hardware_compat,
            version_compatible=self.version_compatible,
            exclude_lean_runtime=self.exclude_lean_runtime,
            plugin_libraries=tuple(Path(p) for p in self.plugins),
            min_precision_share=self.min_precision_share,
            force=force,
            target=self.trt,
            compute_capabilities=parse_compute_capabilities(list(self.compute_capabilities)),
        )
        return BuildRequest(
            model=Path(model), output=Path(output), precision=self.precision, calib_data=self.calib_data,
            calib_limit=self.calib_limit, shapes=self.shapes, min_shapes=tuple(self.min_shapes),
            opt_shapes=tuple(self.opt_shapes), max_shapes=tuple(self.max_shapes), prepared=self.prepared,
            prepare_only=self.prepare_only, keep_prepared=self.keep_prepared, verify=self.verify, preflight=self.preflight, target=self.trt, dcn_target=self.dcn_target,
            skip_rules=tuple(self.skip_rules), seed=self.seed, plan=plan, quantize=self.quantize, command=self.command,
        )


def build(model: PathLike, output: PathLike, settings: BuildSettings | None = None, *, force: bool = False,
          say: Any = None, progress: Any = None, outcome: BuildOutcome | None = None) -> BuildOutcome:
    """check -> rewrite -> precision -> TensorRT build -> verify, as ``trtconv build`` runs it.

    Without TensorRT the CPU stages run, BackendUnavailableError (exit 9) is raised and (unless
    ``keep_prepared``) the prepared ONNX is removed, as after any failure;
    ``BuildSettings(prepare_only=True)`` stops there on purpose and succeeds.
    ``say(stage, status)`` hears each stage start and end; pass ``outcome`` (a fresh
    ``BuildOutcome``) to see how far the pipeline got when it raises.
    """

    req = (settings or BuildSettings()).request(model, output, force=force)
    return run_build(req, say=say, progress=progress, outcome=outcome)


def engine_identity_hash(model: PathLike, output: PathLike, settings: BuildSettings | None = None) -> str:
    """The identity hash the manifest of ``build(model, output, settings)`` will record (the result
    cache keys on it): ONNX, settings, TensorRT version, plugin libraries, target."""
    req = (settings or BuildSettings()).request(model, output)
    return identity_hash(request_identity(req))
