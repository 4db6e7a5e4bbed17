"""TensorRT 10.x/11.x and TensorRT-RTX: what differs between the flavours trtconv drives, in one place.

The rest of ``trtconv.trt`` is shared: network creation, parsing, profiles, memory limits,
progress, serialization and the manifest are the same calls on every flavour (RTX's API
is TensorRT 11's minus plugins and precision flags). What differs is data here:

- the Python module (``tensorrt`` or ``tensorrt_rtx``) and where it comes from;
- plugins: TensorRT has libnvinfer_plugin, plugin libraries and ``tensorrt.plugin``; RTX
  has none usable (only two internal creators; a Python IPluginV3 aborts the process);
- the timing cache: TensorRT keeps one per GPU; on RTX it is a deprecated no-op and
  *touching* it queries the GPU, which breaks CPU-only builds, so it is never touched;
- build targets: TensorRT builds for the GPU it runs on (optionally ``--hardware-compat``
  / ``--version-compatible``); RTX builds ahead of time, without a GPU, for a list of
  compute capabilities (``--compute-capability``; default its portable set);
- the precision check: a TensorRT engine is deserialized and inspected; an RTX engine
  cannot be deserialized on a machine without an RTX-class GPU, so the strongly typed
  network's layer types decide (they are what the engine must follow).

Which flavour the adapter's functions use is a context (:func:`active`), set by the
builder from the plan's target; the module is reached through :data:`trtconv.trt.loader.trt`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from trtconv.plan import RTX_TARGET


@dataclass(frozen=True)
class Flavour:
    name: str  # as the user reads it: "TensorRT" or "TensorRT-RTX"
    module: str  # the Python module trtconv imports
    install_hint: str
    plugins: bool  # libnvinfer_plugin, --plugins libraries, trtconv's tensorrt.plugin plugins
    timing_cache: bool  # False: never create, load or save one (RTX: a no-op that queries the GPU)
    compute_capabilities: bool  # targets are compute capabilities (RTX), not "this GPU"
    hardware_compat: bool  # hardware_compatibility_level / VERSION_COMPATIBLE exist
    needs_gpu_to_build: bool
    inspects_engine: bool  # False: precision is read from the network, not the deserialized engine


TENSORRT = Flavour(
    name="TensorRT",
    module="tensorrt",
    install_hint=(
        "install TensorRT with `pip install tensorrt` (CUDA 13) or `pip install tensorrt-cu12` (CUDA 12); "
        "the native libraries come from NVIDIA's own package index. On Jetson use the JetPack TensorRT. "
        "Without a GPU, `--trt rtx` builds TensorRT-RTX engines (`pip install 'trtconv[rtx]'`)"
    ),
    plugins=True,
    timing_cache=True,
    compute_capabilities=False,
    hardware_compat=True,
    needs_gpu_to_build=True,
    inspects_engine=True,
)
RTX = Flavour(
    name="TensorRT-RTX",
    module="tensorrt_rtx",
    install_hint="pip install 'trtconv[rtx]' (or `pip install tensorrt-rtx`; tensorrt-rtx-cu12 for CUDA 12 drivers)",
    plugins=False,
    timing_cache=False,
    compute_capabilities=True,
    hardware_compat=False,
    needs_gpu_to_build=False,
    inspects_engine=False,
)
FLAVOURS = (TENSORRT, RTX)


def for_target(target: str) -> Flavour:
    """``--trt`` value → flavour: "rtx" is TensorRT-RTX, a version number is TensorRT."""
    return RTX if target == RTX_TARGET else TENSORRT


_ACTIVE: ContextVar[Flavour] = ContextVar("trtconv_trt_flavour", default=TENSORRT)


def current() -> Flavour:
    return _ACTIVE.get()


@contextlib.contextmanager
def active(flavour: Flavour) -> Iterator[Flavour]:
    """Run the adapter's functions against ``flavour`` inside the block."""
    token = _ACTIVE.set(flavour)
    try:
        yield flavour
    finally:
        _ACTIVE.reset(token)
