"""Deserialize, inspect and run an engine; time it for ``trtconv bench``.

Device buffers and streams come from ``polygraphy.cuda`` (a ctypes wrapper over
libcudart that Polygraphy, a TensorRT companion, already ships), so trtconv needs
neither pycuda nor a compiled extension. CUDA graphs are captured through the same
libcudart handle; if capture fails (some plugins and data-dependent shapes forbid
it), timing falls back to plain enqueues and says so.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtconv.errors import (
    BackendUnavailableError,
    BuildError,
    DataError,
    InvalidModelError,
    UnsupportedModelError,
    UsageError,
)
from trtconv.load import looks_like_onnx
from trtconv.plan import manifest_path, read_manifest, rebuild_hint, runtime_mismatches
from trtconv.trt.cudart import EventTimer, capture
from trtconv.trt.environment import probe
from trtconv.trt.flavour import RTX, TENSORRT, Flavour, active, for_target
from trtconv.trt.loader import tensorrt_version
from trtconv.trt.session import LogBridge, load_plugins

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt

log = logging.getLogger(__name__)


def deserialize(data: bytes, *, logger: trt.ILogger | None = None) -> trt.ICudaEngine:
    tensorrt_version()
    logger = logger or LogBridge.make()
    runtime = trt.Runtime(logger)
    runtime.engine_host_code_allowed = True  # version-compatible engines carry their lean runtime
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise InvalidModelError(
            "TensorRT cannot deserialize this engine",
            hint="engines run only with the TensorRT build and GPU architecture they were made with "
            "(see model.engine.json), and need their plugins (--plugins)",
        )
    # TensorRT holds raw pointers: the runtime and its logger must outlive the engine.
    _KEEP.append((runtime, logger))
    return engine


_KEEP: list[Any] = []


def inspector_json(engine: trt.ICudaEngine) -> str:
    inspector = engine.create_engine_inspector()
    return inspector.get_engine_information(trt.LayerInformationFormat.JSON)


def dims_tuple(dims: trt.Dims) -> tuple[int, ...]:
    """Dims supports len() and indexing, not iteration (per the bindings' signatures)."""
    return tuple(int(dims[i]) for i in range(len(dims)))


def _cuda() -> Any:
    try:
        from polygraphy import cuda
    except ImportError as exc:
        raise BackendUnavailableError("polygraphy is not installed (needed for GPU buffers)",
                                      hint="pip install 'trtconv[trt]'") from exc
    return cuda


def check_manifest(engine_path: Path, device: int = 0) -> None:
    """If the engine has a manifest, refuse a TensorRT or GPU it cannot run on, in words."""

    path = manifest_path(engine_path)
    if not path.is_file():
        return
    env = probe()
    gpu = env.gpus[device] if len(env.gpus) > device else None
    manifest = read_manifest(path)
    problems = runtime_mismatches(manifest, env.tensorrt.version, gpu.compute_capability if gpu else None)
    if problems:
        raise InvalidModelError(f"{engine_path.name} cannot run here: " + "; ".join(problems),
                                hint=rebuild_hint(manifest, " on this machine"))


# The first bytes of a serialized TensorRT-RTX engine (seen on every TensorRT-RTX 1.x engine).
RTX_ENGINE_MAGIC = b"vtrt"


def engine_flavour(engine_path: Path, target: str | None = None) -> tuple[Flavour, str]:
    """Which runtime an engine needs, and how that is known: ``target`` (``--trt``), else its
    manifest's build target, else its header (TensorRT-RTX engines start with ``vtrt``), else TensorRT.
    Usage errors (exit 2), never "TensorRT is missing": an ONNX model given where the engine goes, and
    a ``--trt`` the engine's own manifest or header contradicts."""
    if looks_like_onnx(engine_path):
        raise UsageError(f"{engine_path} is an ONNX model, not a TensorRT engine",
                         hint=f"trtconv build {shlex.quote(str(engine_path))} -o "
                              f"{shlex.quote(str(Path(engine_path).with_suffix('.engine')))}")
    known, known_from = _recorded_flavour(engine_path)
    if target:
        if known is not None and known != for_target(target):
            raise UsageError(f"{engine_path} is a {known.name} engine (known from {known_from}), but --trt {target} "
                             f"names {for_target(target).name}",
                             hint="drop --trt: the engine runs on the TensorRT it was built with")
        return for_target(target), "--trt"
    return (known, known_from) if known is not None else (TENSORRT, "")


def _recorded_flavour(engine_path: Path) -> tuple[Flavour | None, str]:
    """What the engine's manifest (its build target) or header says it needs; None where neither says."""
    path = manifest_path(engine_path)
    if path.is_file():
        try:
            build = read_manifest(path).get("build") or {}
            if build.get("target"):
                return for_target(str(build["target"])), f"its manifest {path.name}"
        except (DataError, OSError):
            pass
    try:
        with open(engine_path, "rb") as f:
            head = f.read(len(RTX_ENGINE_MAGIC))
    except OSError:
        head = b""
    if head == RTX_ENGINE_MAGIC:
        return RTX, "its header"
    return None, ""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  # -1 for dynamic dims


class EngineRunner:
    """One engine, one execution context, one stream; inputs copied in, outputs copied out."""

    def __init__(self, engine_path: Path, plugin_libraries: tuple[Path, ...] = (), *,
                 check_compatibility: bool = True, target: str | None = None) -> None:
        flavour, known_from = engine_flavour(Path(engine_path), target)
        with active(flavour):  # an RTX engine needs TensorRT-RTX's runtime (on an RTX GPU)
            self._open(Path(engine_path), plugin_libraries, check_compatibility, flavour, known_from)

    def _open(self, engine_path: Path, plugin_libraries: tuple[Path, ...], check_compatibility: bool,
              flavour: Flavour, known_from: str) -> None:
        said = f" (known from {known_from})" if known_from else ""
        try:
            tensorrt_version()
        except BackendUnavailableError as exc:
            if known_from:
                raise BackendUnavailableError(f"{engine_path.name} is a {flavour.name} engine{said}, and {exc.message}",
                                              hint=exc.hint) from None
            raise BackendUnavailableError(  # neither manifest nor a known header: say what was assumed
                f"{exc.message} ({engine_path.name} has no manifest, so it is taken for a {flavour.name} engine)",
                hint=f"{exc.hint}; for a TensorRT-RTX engine pass --trt rtx") from None
        if not flavour.needs_gpu_to_build and not probe(import_tensorrt=False).gpus:
            # TensorRT-RTX builds without a GPU but cannot run without one (it would fail inside CUDA)
            raise BackendUnavailableError(f"{engine_path.name} is a {flavour.name} engine{said}: it runs only on an "
                                          "RTX-class GPU, and this machine has none",
                                          hint="run it where `trtconv doctor` lists a GPU of the compute capabilities "
                                          "it was built for (`build.compute_capabilities` in its manifest)")
        self._cuda = _cuda()
        if check_compatibility:
            check_manifest(Path(engine_path))
        logger = self._logger = LogBridge.make()
        if flavour.plugins:
            load_plugins(logger, plugin_libraries)
        self.engine = deserialize(Path(engine_path).read_bytes(), logger=logger)
        self.context = self.engine.create_execution_context()
        self.stream = self._cuda.Stream()
        self.inputs: list[TensorInfo] = []
        self.outputs: list[TensorInfo] = []
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            info = TensorInfo(name, np.dtype(trt.nptype(self.engine.get_tensor_dtype(name))),
                              dims_tuple(self.engine.get_tensor_shape(name)))
            if self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                self.inputs.append(info)
            else:
                self.outputs.append(info)
        self._buffers: dict[str, Any] = {}
        self._profile = 0

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        buf = self._buffers.get(name)
        if buf is None:
            buf = self._cuda.DeviceArray(shape=shape, dtype=dtype)
            self._buffers[name] = buf
        else:
            buf.resize(shape)
        return buf

    def select_profile(self, index: int) -> None:
        """Run with optimization profile ``index`` (0 is the default)."""
        if index == self._profile:
            return
        if not 0 <= index < self.engine.num_optimization_profiles:
            raise UsageError(f"the engine has {self.engine.num_optimization_profiles} profile(s), not {index + 1}")
        if not self.context.set_optimization_profile_async(index, int(self.stream.ptr)):
            raise BuildError(f"TensorRT refused to switch to optimization profile {index}")
        self.stream.synchronize()
        self._profile = index

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Copy inputs to the GPU and bind every tensor; the next enqueue computes on them."""
        missing = [t.name for t in self.inputs if t.name not in feeds]
        if missing:
            raise UsageError(f"no data for engine input(s) {', '.join(missing)}",
                             hint="the ONNX or the inputs given do not match this engine's inputs")
        for t in self.inputs:
            host = np.ascontiguousarray(feeds[t.name], dtype=t.dtype)
            if not self.context.set_input_shape(t.name, tuple(host.shape)):
                raise UsageError(
                    f"input {t.name!r} shape {list(host.shape)} is outside the engine's optimization profile",
                    hint="see the profiles in model.engine.json",
                )
            buf = self._buffer(t.name, tuple(host.shape), t.dtype)
            buf.copy_from(host, stream=self.stream)
            self.context.set_tensor_address(t.name, int(buf.ptr))
        unresolved = self.context.infer_shapes()
        if unresolved:
            raise UnsupportedModelError(f"TensorRT cannot infer shapes for {', '.join(unresolved)}")
        for t in self.outputs:
            shape = dims_tuple(self.context.get_tensor_shape(t.name))
            if any(d < 0 for d in shape):
                raise UnsupportedModelError(
                    f"output {t.name!r} has a data-dependent shape, which trtconv verify/bench do not support",
                    hint="use `polygraphy run --trt` for such engines",
                )
            buf = self._buffer(t.name, shape, t.dtype)
            self.context.set_tensor_address(t.name, int(buf.ptr))

    def enqueue(self) -> None:
        if not self.context.execute_async_v3(int(self.stream.ptr)):
            raise BuildError("TensorRT failed to run the engine (see its log above)",
                             hint="rerun with -v for TensorRT's full log")

    def fetch(self) -> dict[str, np.ndarray]:
        out = {}
        for t in self.outputs:
            buf = self._buffers[t.name]
            host = np.empty(tuple(buf.shape), dtype=t.dtype)
            buf.copy_to(host, stream=self.stream)
            out[t.name] = host
        self.stream.synchronize()
        return out

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.prepare(feeds)
        self.enqueue()
        return self.fetch()

    def time_enqueues(self, *, warmup: int, iterations: int, cuda_graph: bool
                      ) -> tuple[list[float], list[float], str | None]:
        """Per iteration: latency in ms (host: launch to stream idle) and GPU time in ms (CUDA
        events around the work); and why no CUDA graph was used, if none was."""

        for _ in range(max(1, warmup)):
            self.enqueue()
        self.stream.synchronize()
        launch = self.enqueue
        why_not: str | None = "disabled" if not cuda_graph else None
        if cuda_graph:
            graph_launch, why_not = self._capture_graph()
            if graph_launch is not None:
                launch = graph_launch
                launch()
                self.stream.synchronize()
        timer = EventTimer(self._cuda.wrapper().handle, int(self.stream.ptr))
        host, gpu = [], []
        try:
            for _ in range(iterations):
                start = time.perf_counter()
                gpu.append(timer.time(launch))
                host.append((time.perf_counter() - start) * 1000.0)
        finally:
            timer.close()
        return host, gpu, why_not

    def _capture_graph(self) -> tuple[Any, str | None]:

        graph, why_not = capture(self._cuda.wrapper().handle, int(self.stream.ptr),
                                 lambda: self.context.execute_async_v3(int(self.stream.ptr)))
        if graph is None:
            return None, why_not
        _KEEP.append(graph)
        return graph.launch, None


def engine_io(engine_path: Path, plugin_libraries: tuple[Path, ...] = ()) -> dict[str, list[dict[str, object]]]:
    runner = EngineRunner(engine_path, plugin_libraries)
    return {
        "inputs": [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.shape)} for t in runner.inputs],
        "outputs": [{"name": t.name, "dtype": str(t.dtype), "shape": list(t.shape)} for t in runner.outputs],
    }


def profile_shapes(runner: EngineRunner, profile: int = 0) -> dict[str, list[tuple[int, ...]]]:
    """Each input's [min, opt, max] in ``profile``; equal for static inputs."""
    out = {}
    for t in runner.inputs:
        shapes = runner.engine.get_tensor_profile_shape(t.name, profile)
        out[t.name] = [dims_tuple(s) for s in shapes]
    return out
