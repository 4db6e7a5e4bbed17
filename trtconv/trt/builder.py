"""Execute a ``BuildPlan`` with TensorRT: parse, configure, build, check precision, serialize.

One adapter for TensorRT 10.x, 11.x and TensorRT-RTX. The API differences that matter
here are in ``trtconv.trt.compat`` (11.x networks are always strongly typed, 10.x needs
the STRONGLY_TYPED flag; no FP16/INT8 builder flags in 11.x/RTX, so precision comes from
the ONNX everywhere; enum integers were renumbered, so only names are used); the product
differences (plugins, timing cache, compute-capability targets, whether the engine can be
inspected here) are the ``Flavour`` fields in ``trtconv.trt.flavour``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import onnx

from trtconv.errors import BackendUnavailableError, BuildError, OutputError, UsageError
from trtconv.load import shapes_text
from trtconv.outputs import write_bytes
from trtconv.plan import (
    CORNERS,
    BuildPlan,
    PrecisionSummary,
    Profile,
    assert_precision,
    onnx_has_reduced_precision,
    summarize_inspector,
    summarize_network,
)
from trtconv.trt import compat
from trtconv.trt.cancel import Cancel, deferred_signals
from trtconv.trt.describe import engine_bindings, network_bindings
from trtconv.trt.engine import deserialize, inspector_json
from trtconv.trt.failing_node import FailingNode, locate, plan_builds
from trtconv.trt.flavour import TENSORRT, Flavour, active, for_target
from trtconv.trt.loader import tensorrt_version
from trtconv.trt.plugins import dcnv2
from trtconv.trt.session import TRT_LOGGER, LogBridge, LogRepeats, load_plugins, register_trtconv_plugins

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt

log = logging.getLogger(__name__)


class ProgressSink(Protocol):
    """What the CLI's progress bar implements; called from TensorRT's builder threads."""

    def phase_start(self, name: str, parent: str | None, steps: int) -> None: ...
    def step(self, name: str, step: int) -> None: ...
    def phase_finish(self, name: str) -> None: ...


@dataclass(frozen=True)
class ParserIssue:
    node_index: int
    node_name: str
    op: str
    code: str
    description: str

    def describe(self) -> str:
        name = self.node_name or f"#{self.node_index}"
        return f"node {name} ({self.op or '?'}): {self.description} [{self.code}]"


@dataclass(frozen=True)
class BuildResult:
    engine_path: Path
    engine_bytes: int
    seconds: float
    precision: PrecisionSummary
    precision_share: float | None  # None: fused layers hide it (see precision_check)
    plugins_needed: tuple[str, ...]
    timing_cache: Path | None
    tensorrt: str
    extra: dict[str, Any] = field(default_factory=dict)
    flavour: str = "TensorRT"
    precision_source: str = "engine"  # "engine" (inspector) | "network" (strongly typed layer types)
    compute_capabilities: tuple[str, ...] = ()  # RTX: what the engine was built for
    engine_sha256: str = ""  # of the bytes written (hashed in memory: the engine is not read back)


TENSORRT_PHASE = "tensorrt: "


def tensorrt_phase(phase: str) -> str:
    """A TensorRT build phase as the progress sink gets it: marked as TensorRT's, never read as one of
    trtconv's own stages or precision phases."""
    return TENSORRT_PHASE + phase


def _progress_monitor(sink: ProgressSink | None, cancel: Cancel) -> trt.IProgressMonitor:
    """TensorRT's progress callbacks → ``sink``, and the way a build is cancelled: ``step_complete``
    returns False once ``cancel`` was requested (Ctrl-C, SIGTERM, the caller). An interrupt that
    still surfaces in a callback must not unwind through TensorRT's C++ frames: it is recorded.
    Phase names (and parents) reach ``sink`` through :func:`tensorrt_phase`."""

    class Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:  # type: ignore[override]
            try:
                if sink is not None:
                    parent = None if parent_phase is None else tensorrt_phase(parent_phase)
                    sink.phase_start(tensorrt_phase(phase_name), parent, int(num_steps))
            except KeyboardInterrupt:
                cancel.request()

        def step_complete(self, phase_name: str, step: int) -> bool:  # type: ignore[override]
            try:
                if sink is not None:
                    sink.step(tensorrt_phase(phase_name), int(step))
            except KeyboardInterrupt:
                cancel.request()
            return not cancel.requested  # False asks TensorRT to cancel the build

        def phase_finish(self, phase_name: str) -> None:
            try:
                if sink is not None:
                    sink.phase_finish(tensorrt_phase(phase_name))
            except KeyboardInterrupt:
                cancel.request()

    return Monitor()


def _plugins_portable(portable: bool) -> None:
    """Tell trtconv's plugins whether the engine must run on GPUs other than this one."""

    dcnv2.set_portable(portable)


def parser_error(model_name: str, issues: list[ParserIssue], shown: int = 10, *,
                 flavour: Flavour = TENSORRT) -> BuildError:
    """One error naming every rejected node (up to ``shown``): name, op, TensorRT's reason."""
    lines = "; ".join(i.describe() for i in issues[:shown]) or "no details reported"
    more = f" (and {len(issues) - shown} more)" if len(issues) > shown else ""
    hint = ("run `trtconv check --trt rtx` for a per-node report; TensorRT-RTX has no plugins, so plugin "
            "nodes must be rewritten into standard ONNX" if not flavour.plugins else
            "run `trtconv check` for a per-node report; plugin nodes need --plugins")
    return BuildError(f"{flavour.name}'s ONNX parser rejected {model_name}: {lines}{more}", hint=hint)


def parser_issues(parser: trt.OnnxParser) -> list[ParserIssue]:
    issues = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        issues.append(ParserIssue(
            node_index=int(err.node()),
            node_name=str(err.node_name()),
            op=str(err.node_operator()),
            code=str(err.code()).rsplit(".", 1)[-1],
            description=str(err.desc()).strip(),
        ))
    return issues


def _dims(trt_mod: Any, shape: tuple[int, ...]) -> trt.Dims:
    return cast("trt.Dims", trt_mod.Dims(list(shape)))


def configure(builder: trt.Builder, network: trt.INetworkDefinition, plan: BuildPlan,
              timing_cache: Path | None, flavour: Flavour) -> trt.IBuilderConfig:
    config = builder.create_builder_config()
    for pool, size in plan.memory_pools:
        config.set_memory_pool_limit(getattr(trt.MemoryPoolType, pool.upper()), size)
    config.builder_optimization_level = plan.optimization_level
    # DETAILED: the inspector must report each layer's types for the precision check.
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if plan.max_aux_streams is not None:
        config.max_aux_streams = plan.max_aux_streams
    if flavour.compute_capabilities:
        compat.set_compute_capabilities(config, plan.build_targets())
    if flavour.hardware_compat:
        config.hardware_compatibility_level = compat.hardware_level(plan.hardware_compat)
    if flavour.plugins:
        _plugins_portable(plan.hardware_compat == "ampere+")
    if plan.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
        if plan.exclude_lean_runtime:
            config.set_flag(trt.BuilderFlag.EXCLUDE_LEAN_RUNTIME)
        config.plugins_to_serialize = [str(p) for p in plan.plugin_libraries]
    for index, profile in enumerate(plan.profiles):
        _add_profile(builder, config, profile, index, _shape_tensor_inputs(network))
    _require_shape_values(network, plan)
    if timing_cache is not None and flavour.timing_cache:  # RTX: never touched (it would query the GPU)
        data = b""
        if timing_cache.is_file():
            data = timing_cache.read_bytes()
        cache = config.create_timing_cache(data)
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            log.warning("timing cache %s was made by another TensorRT or GPU; starting a new one", timing_cache)
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    return config


def _shape_tensor_inputs(network: trt.INetworkDefinition) -> set[str]:
    """The inputs the parser made shape tensors (their values set shapes: they need values in a profile)."""
    inputs = (network.get_input(i) for i in range(network.num_inputs))
    return {t.name for t in inputs if t.is_shape_tensor}


def _require_shape_values(network: trt.INetworkDefinition, plan: BuildPlan) -> None:
    """A usage error naming each shape-tensor input some profile gives no values for (TensorRT's own
    words, "missing values for shape input tensor", come minutes later and name no option)."""
    shape_inputs = _shape_tensor_inputs(network)
    for index, profile in enumerate(plan.profiles or (Profile(()),)):
        missing = sorted(shape_inputs - set(profile.value_corner("opt")))
        if missing:
            given = shapes_text(profile.corner("opt"), profile.value_corner("opt"))
            example = ",".join(filter(None, (given, *(f"{n}:[{','.join(['1'] * max(1, _volume(network, n)))}]"
                                                      for n in missing))))
            raise UsageError(
                f"input(s) {', '.join(map(repr, missing))} are shape tensors (their values set shapes): TensorRT "
                f"needs their values in every optimization profile; profile {index} gives none",
                hint=f"give the values your inputs will hold in --shapes (or in each of --min-shapes/--opt-shapes/"
                     f"--max-shapes), e.g. --shapes '{example}'; or give --calib-data samples holding them "
                     f"(docs/cli.md)")


def _volume(network: trt.INetworkDefinition, name: str) -> int:
    for i in range(network.num_inputs):
        t = network.get_input(i)
        if t.name == name:
            n = 1
            shape = t.shape
            for axis in range(len(shape)):
                n *= max(int(shape[axis]), 1)
            return n
    return 1


def _add_profile(builder: trt.Builder, config: trt.IBuilderConfig, profile: Profile, index: int,
                 shape_inputs: set[str]) -> None:
    p = builder.create_optimization_profile()
    for name, rng in profile.inputs:
        try:
            p.set_shape(name, _dims(trt, rng.min), _dims(trt, rng.opt), _dims(trt, rng.max))
        except ValueError as exc:
            raise BuildError(f"profile {index}: TensorRT rejects the shapes of {name!r}: {exc}") from exc
    for name, rng in profile.values:
        if name not in shape_inputs:
            log.warning("profile %d gives values for input %r, which TensorRT does not use as a shape; they only "
                        "feed the pre-flight", index, name)
            continue
        try:
            p.set_shape_input(name, list(rng.min), list(rng.opt), list(rng.max))
        except (ValueError, TypeError) as exc:
            raise BuildError(f"profile {index}: TensorRT rejects the values of shape input {name!r}: {exc}") from exc
    if config.add_optimization_profile(p) < 0:
        raise BuildError(f"profile {index}: TensorRT rejected the optimization profile")


def save_timing_cache(config: trt.IBuilderConfig, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = bytes(cast(Any, config.get_timing_cache().serialize()))
        write_bytes(path, data, force=True)
    except (OSError, OutputError) as exc:  # a cache is an optimisation: never fail the build for it
        log.warning("could not save the timing cache to %s: %s", path, exc)


def plugin_layers(network: trt.INetworkDefinition) -> list[str]:
    """``name/version/namespace`` of every plugin the network uses: needed again at run time.

    ``get_layer`` returns the ILayer base; as Polygraphy does, the Python class is set to the
    layer's own type before reading its plugin. Reporting never fails a build."""
    found: set[str] = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        try:
            if layer.type == trt.LayerType.PLUGIN_V2:
                layer.__class__ = trt.IPluginV2Layer
                v2 = cast(trt.IPluginV2Layer, layer).plugin
                found.add(f"{v2.plugin_type}/{v2.plugin_version}/{v2.plugin_namespace}")
            elif layer.type == trt.LayerType.PLUGIN_V3:
                layer.__class__ = trt.IPluginV3Layer
                v3 = cast(trt.IPluginV3Layer, layer).plugin
                core = cast(trt.IPluginV3OneCore, v3.get_capability_interface(trt.PluginCapabilityType.CORE))
                found.add(f"{core.plugin_name}/{core.plugin_version}/{core.plugin_namespace}")
        except Exception as exc:  # a plugin the bindings cannot describe: name the layer instead
            log.debug("cannot describe plugin layer %s: %s", layer.name, exc)
            found.add(f"{layer.name} (plugin)")
    return sorted(found)


def _onnx_reduced(plan: BuildPlan) -> bool:
    return onnx_has_reduced_precision(onnx.load(str(plan.onnx_path), load_external_data=False), plan.precision)


# A Dequantize's input tells the type its consumer computes in: TensorRT fuses Q/DQ into the
# layer after it, so a Conv fed by DQ(int8) runs in INT8 though the network shows FP32 there.
_QUANTIZED = ("INT8", "FP8", "INT4", "FP4")


def _member_name(value: trt.DataType | trt.LayerType) -> str:
    return str(value).rsplit(".", 1)[-1]


def network_layer_info(network: trt.INetworkDefinition) -> dict[str, Any]:
    """The parsed, strongly typed network in the engine inspector's JSON schema (layer type in title
    case, ``DataType`` per tensor), for ``summarize_network``. A strongly typed
    build must follow these types, so they are the achieved precision where the engine itself
    cannot be inspected (TensorRT-RTX without an RTX GPU)."""
    producers: dict[str, tuple[str, str]] = {}  # tensor name -> (producing layer type, its input's type)
    layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        kind = _member_name(layer.type)
        first = layer.get_input(0) if layer.num_inputs else None
        first_type = _member_name(first.dtype) if first is not None else ""
        for j in range(layer.num_outputs):
            producers[layer.get_output(j).name] = (kind, first_type)

        def tensor(t: trt.ITensor | None) -> dict[str, str]:
            if t is None:  # an optional input left empty
                return {}
            source, source_type = producers.get(t.name, ("", ""))
            dtype = source_type if source == "DEQUANTIZE" and source_type in _QUANTIZED else _member_name(t.dtype)
            return {"Name": t.name, "DataType": dtype}

        layers.append({
            "Name": layer.name,
            "LayerType": kind.title(),  # CONCATENATION -> Concatenation, as the inspector spells it
            "Inputs": [tensor(layer.get_input(k)) for k in range(layer.num_inputs)],
            "Outputs": [tensor(layer.get_output(k)) for k in range(layer.num_outputs)],
        })
    return {"Layers": layers}


_FAULT = re.compile(r"Profile k(MIN|OPT|MAX) values are not self-consistent\.?\s*(.*?)(?:\s+In \w+ at \S+.*)?$", re.S)


def profile_error(faults: list[str], profiles: tuple[Profile, ...], flavour: Flavour = TENSORRT) -> UsageError:
    """The builder's own shape check failed at a profile corner (it warns and would build an engine that
    fails at run time at those shapes): exit 2, the corner's shapes and the layer it names."""
    found = _FAULT.search(faults[0])
    corner = found.group(1).lower() if found else "?"
    detail = (found.group(2) if found else faults[0]).strip().rstrip(".")
    detail = re.sub(r"\s+", " ", detail)[:300]
    which = next((c for c in CORNERS if c == corner), None)
    shapes = "; ".join(f"profile {i}: " + ", ".join(f"{n}:{'x'.join(map(str, s))}" for n, s in p.corner(which).items())
                       for i, p in enumerate(profiles)) if which is not None else ""
    return UsageError(
        f"{flavour.name}'s builder: the graph cannot take the {corner} shapes of the profile"
        + (f" ({shapes})" if shapes else "") + f": {detail}",
        hint="narrow the profile (--min-shapes/--opt-shapes/--max-shapes) to shapes the model supports; "
        "nothing was written")


def builder_error(messages: list[str], flavour: Flavour = TENSORRT, where: FailingNode | None = None) -> BuildError:
    """The builder returned no engine: where it starts to fail (if found) and its own error text, in one
    message (a Myelin error's later lines are the ones that say what and where: kept, joined)."""
    said = "; ".join(dict.fromkeys(" ".join(m.split()) for m in messages if m.strip()))
    if len(said) > 600:
        said = said[:600] + " ..."
    place = f": {where.describe()}" if where is not None else ""
    words = (f"; its error: {said}" if place else f": {said}") if said else \
        " (it reported no error; rerun with -v for its full log)"
    hint = ("-v, for TensorRT's full log (the builder, not its parser, refuses this graph: `trtconv check` reads "
            "the parser)") if where is not None else "-v, for TensorRT's full log; `trtconv check` lists nodes it may reject"
    return BuildError(f"{flavour.name}'s builder failed{place}{words}", hint=hint, retry=("-v", ""))


def _report_errors(errors: list[str]) -> None:
    """Error lines TensorRT logged on a step that still succeeded: each shown once (-v showed them live)."""
    trt_log = logging.getLogger(TRT_LOGGER)
    if not trt_log.isEnabledFor(logging.INFO):
        for message in dict.fromkeys(errors):
            trt_log.warning("%s (logged as an error; the step succeeded)", message)
    errors.clear()


def build_engine(
    plan: BuildPlan,
    *,
    timing_cache: Path | None,
    progress: ProgressSink | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> BuildResult:
    """Build, check the achieved precision, then write the engine atomically.

    Nothing is written if the parser, builder or precision check fails."""
    flavour = for_target(plan.target)
    with active(flavour):
        return _build(plan, flavour, timing_cache if flavour.timing_cache else None, progress, cancelled)


def open_network(logger: trt.ILogger, plan: BuildPlan, flavour: Flavour, creators: dict[str, list[str]] | None = None
                 ) -> tuple[trt.Builder, trt.INetworkDefinition, trt.OnnxParser, list[str]]:
    """Builder, network and parser for ``plan``, with the plugins its flavour loads (the names loaded; ``creators``
    receives each library's plugin creators): what a build and a prefix build of it (failing_node) start from."""
    plugins = load_plugins(logger, plan.plugin_libraries, creators) if flavour.plugins else []
    builder = trt.Builder(logger)
    if builder is None:
        raise BackendUnavailableError(f"{flavour.name} could not create a builder (no usable GPU?)",
                                      hint="run `trtconv doctor` to see what TensorRT and CUDA can see")
    # trtconv's Python plugins ship ahead-of-time (PTX) implementations: prefer those, so the
    # engine runs without Python (a JIT plugin would need trtconv at deserialization).
    prefer_aot = flavour.plugins and bool(register_trtconv_plugins())
    network = builder.create_network(compat.network_flags(prefer_aot=prefer_aot))
    return builder, network, trt.OnnxParser(network, logger), plugins


def _build(plan: BuildPlan, flavour: Flavour, timing_cache: Path | None, progress: ProgressSink | None,
           cancelled: Callable[[], bool]) -> BuildResult:
    version = tensorrt_version()
    errors: list[str] = []
    faults: list[str] = []  # profile corners the graph cannot take: the build stops at the first
    cancel = Cancel(lambda: cancelled() or bool(faults))
    repeats = LogRepeats()
    logger = LogBridge.make(errors, cancel, repeats, faults)
    creators: dict[str, list[str]] = {}
    builder, network, parser, plugins = open_network(logger, plan, flavour, creators)
    with deferred_signals(cancel):  # Ctrl-C in TensorRT's callbacks: recorded, then the build is cancelled
        parsed = parser.parse_from_file(str(plan.onnx_path))
    repeats.report()
    cancel.raise_if_requested()
    if not parsed:
        raise parser_error(plan.onnx_path.name, parser_issues(parser), flavour=flavour)
    _report_errors(errors)  # the parser succeeded: what it called an error is shown once, as a warning
    network_share: tuple[PrecisionSummary, float | None] | None = None
    layers: dict[str, Any] = {}
    if not flavour.inspects_engine:  # checked before minutes of building, from the network's types
        layers = network_layer_info(network)
        summary = summarize_network(layers)
        network_share = summary, assert_precision(summary, plan.precision, plan.min_precision_share)
    config = configure(builder, network, plan, timing_cache, flavour)
    monitor = _progress_monitor(progress, cancel)  # always: it is how a build is cancelled
    config.progress_monitor = monitor  # TensorRT holds a raw pointer: ``monitor`` keeps the object alive
    start = time.monotonic()
    with deferred_signals(cancel):
        serialized = builder.build_serialized_network(network, config)
    seconds = time.monotonic() - start
    repeats.report()
    if faults:
        raise profile_error(faults, plan.profiles, flavour)
    cancel.raise_if_requested()  # the build was cancelled cleanly; nothing was written
    if serialized is None:
        raise builder_error(errors, flavour, locate(plan.onnx_path, errors, plan_builds(plan, flavour), progress=progress))
    _report_errors(errors)
    if timing_cache is not None:
        save_timing_cache(config, timing_cache)
    data = bytes(cast(Any, serialized))
    if network_share is None:
        engine = deserialize(data, logger=logger)
        layers = json.loads(inspector_json(engine))
        summary = summarize_inspector(layers)
        share = assert_precision(summary, plan.precision, plan.min_precision_share,
                                 onnx_reduced=_onnx_reduced(plan) if summary.opaque_layers else None)
    else:
        summary, share = network_share
    write_bytes(plan.engine_path, data, force=plan.force)
    needed = sorted(set(plugin_layers(network)) | set(parser.get_used_vc_plugin_libraries()))
    # what `trtconv inspect` and the Triton repository read where the engine cannot be deserialized
    extra = {"layers": list(layers.get("Layers") or []), "bindings": network_bindings(network),
             "plugin_creators": creators}
    if network_share is None:
        extra["bindings"] = engine_bindings(engine)[0]
    log.info("built %s in %.1f s (%d bytes, plugins: %s)", plan.engine_path, seconds, len(data), plugins or "none")
    return BuildResult(
        engine_path=plan.engine_path,
        engine_bytes=len(data),
        seconds=seconds,
        precision=summary,
        precision_share=share,
        plugins_needed=tuple(needed),
        timing_cache=timing_cache,
        tensorrt=version,
        flavour=flavour.name,
        precision_source="engine" if flavour.inspects_engine else "network",
        compute_capabilities=plan.build_targets(),
        extra=extra,
        engine_sha256=hashlib.sha256(data).hexdigest(),
    )
