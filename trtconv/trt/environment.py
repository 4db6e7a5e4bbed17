"""What this machine offers for TensorRT work: TensorRT, CUDA driver/runtime, GPUs.

Probed without TensorRT where possible: the CUDA driver API (libcuda) and runtime
(libcudart) through ctypes, the driver version from /proc or nvidia-smi, package
versions from metadata. ``tensorrt`` and ``tensorrt_rtx`` are imported only by
``probe_tensorrt``, so ``trtconv doctor`` can say *why* one fails to import (missing
libnvinfer, wrong CUDA). TensorRT-RTX builds without a GPU, so it is "ready" on its own.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from trtconv.settings import NEWEST_TENSORRT, RTX_TARGET, TRT_TARGETS
from trtconv.trt.flavour import RTX, TENSORRT, Flavour

TRT_DISTS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-libs", "tensorrt-cu12-libs",
             "tensorrt-cu13-bindings", "tensorrt-cu12-bindings", "tensorrt-lean", "tensorrt-dispatch")
RTX_DISTS = ("tensorrt-rtx", "tensorrt-rtx-cu13", "tensorrt-rtx-cu12", "tensorrt-rtx-cu13-libs",
             "tensorrt-rtx-cu12-libs", "tensorrt-rtx-cu13-bindings", "tensorrt-rtx-cu12-bindings")
INSTALL_HINT = TENSORRT.install_hint
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory_bytes: int | None
    sm_count: int | None = None  # streaming multiprocessors: part of what an engine's tactics were timed on


@dataclass(frozen=True)
class TensorRTStatus:
    importable: bool
    version: str | None = None
    error: str | None = None
    distributions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Environment:
    tensorrt: TensorRTStatus
    cuda_driver: str | None  # CUDA version the driver supports, e.g. "13.0"
    driver: str | None  # NVIDIA kernel driver version, e.g. "580.65.06"
    cuda_runtime: str | None  # libcudart found by the loader
    gpus: tuple[Gpu, ...]
    driver_error: str | None
    packages: dict[str, str | None]
    tensorrt_rtx: TensorRTStatus = field(default_factory=lambda: TensorRTStatus(False, None, "not probed"))

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def status(self, flavour: Flavour) -> TensorRTStatus:
        return self.tensorrt_rtx if flavour == RTX else self.tensorrt

    def manifest_fields(self, device: int = 0, flavour: Flavour = TENSORRT) -> dict[str, object]:
        gpu = self.gpus[device] if len(self.gpus) > device else None
        return {
            "tensorrt": self.status(flavour).version,
            "tensorrt_flavour": flavour.name,
            "cuda_runtime": self.cuda_runtime,
            "cuda_driver": self.cuda_driver,
            "driver": self.driver,
            "gpu": gpu.name if gpu else None,
            "compute_capability": gpu.compute_capability if gpu else None,
        }


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def probe_tensorrt(flavour: Flavour = TENSORRT) -> TensorRTStatus:
    name = flavour.module
    dists = {d: v for d in (RTX_DISTS if flavour == RTX else TRT_DISTS) if (v := _dist_version(d))}
    if importlib.util.find_spec(name) is None:
        return TensorRTStatus(False, None, f"the Python package `{name}` is not installed", dists)
    try:
        mod = importlib.import_module(name)
    except Exception as exc:  # ImportError, or OSError from a missing libnvinfer
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return TensorRTStatus(False, None, f"import {name} failed: {text}", dists)
    return TensorRTStatus(True, str(getattr(mod, "__version__", "unknown")), None, dists)


def _format_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _load_first(names: list[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _pip_cuda_libs(pattern: str) -> list[str]:
    """CUDA libraries shipped in pip wheels (nvidia-cuda-runtime-cuXX and friends)."""
    found: list[str] = []
    for base in {p for p in sys.path if p.endswith("site-packages")}:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", pattern)))
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "lib", pattern)))
    return found


def probe_driver() -> tuple[str | None, tuple[Gpu, ...], str | None]:
    """(CUDA version the driver supports, GPUs, error) through the CUDA driver API."""
    lib = _load_first(["libcuda.so.1", "libcuda.so"])
    if lib is None:
        return None, (), "no NVIDIA driver (libcuda.so.1 not found)"
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None, (), "libcuda.so.1 found, but cuDriverGetVersion failed"
    status = lib.cuInit(0)
    if status != 0:
        return _format_cuda_version(version.value), (), f"cuInit failed with CUDA error {status} (no usable GPU?)"
    count = ctypes.c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(count))
    gpus = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        mem = ctypes.c_size_t(0)
        total = mem.value if lib.cuDeviceTotalMem_v2(ctypes.byref(mem), dev) == 0 else None
        sms = ctypes.c_int(0)
        sm_count = sms.value if lib.cuDeviceGetAttribute(ctypes.byref(sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                         dev) == 0 else None
        gpus.append(Gpu(i, name.value.decode(errors="replace"), f"{major.value}.{minor.value}", total, sm_count))
    return _format_cuda_version(version.value), tuple(gpus), None


def probe_driver_version() -> str | None:
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        for word in proc.read_text(errors="replace").split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
            return line or None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def probe_cuda_runtime() -> str | None:
    candidates = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"] + _pip_cuda_libs("libcudart.so*")
    lib = _load_first(candidates)
    if lib is None:
        return None
    v = ctypes.c_int(0)
    try:
        if lib.cudaRuntimeGetVersion(ctypes.byref(v)) != 0:
            return None
    except AttributeError:
        return None
    return _format_cuda_version(v.value)


def probe(*, import_tensorrt: bool = True) -> Environment:
    cuda_driver, gpus, err = probe_driver()
    packages = {name: _dist_version(name) for name in ("polygraphy", "cuda-python", "cuda-bindings",
                                                        "onnxruntime", "onnxruntime-gpu", "onnx")}
    if packages["polygraphy"] is None and importlib.util.find_spec("polygraphy") is not None:
        import polygraphy  # importable without pip metadata (vendored, PYTHONPATH)

        packages["polygraphy"] = str(getattr(polygraphy, "__version__", "unknown"))
    trt = probe_tensorrt() if import_tensorrt else TensorRTStatus(False, None, "not probed")
    rtx = probe_tensorrt(RTX) if import_tensorrt else TensorRTStatus(False, None, "not probed")
    return Environment(
        tensorrt_rtx=rtx,
        tensorrt=trt,
        cuda_driver=cuda_driver,
        driver=probe_driver_version() if gpus or cuda_driver else None,
        cuda_runtime=probe_cuda_runtime(),
        gpus=gpus,
        driver_error=err,
        packages=packages,
    )


def trt_cuda_major(distributions: dict[str, str]) -> int | None:
    """CUDA major version the installed TensorRT wheels target (tensorrt-cu12-* / -cu13-*)."""
    for name in distributions:
        for major in (13, 12):
            if f"cu{major}" in name:
                return major
    return None


def problems(env: Environment) -> list[tuple[str, str]]:
    """(what is missing, what to do) for building and running engines here."""
    out = []
    if not env.tensorrt.importable:
        err = env.tensorrt.error or ""
        if "cannot open shared object file" in err:
            lib = err.split(":")[1].strip() if err.count(":") >= 2 else "libnvinfer"
            fix = (f"the Python bindings are installed but TensorRT's libraries ({lib}) are not on the loader "
                   "path: pip install the matching tensorrt-cu12-libs/tensorrt-cu13-libs, or add the folder "
                   "holding them to LD_LIBRARY_PATH")
            out.append((f"TensorRT: {err}", fix))
        else:
            out.append((f"TensorRT: {err}", INSTALL_HINT))
    if env.driver_error:
        out.append((f"GPU: {env.driver_error}", "TensorRT needs an NVIDIA GPU (Turing or newer) and its driver"))
    elif not env.gpus:
        out.append(("GPU: the driver sees no GPU", "check CUDA_VISIBLE_DEVICES and `nvidia-smi`"))
    else:
        old = [g for g in env.gpus if float(g.compute_capability) < 7.5]
        for g in old:
            out.append((f"GPU {g.index} {g.name} (sm {g.compute_capability}) is older than Turing",
                        "TensorRT 10.5+ and 11.x need compute capability 7.5 or newer"))
    flavor = trt_cuda_major(env.tensorrt.distributions)
    if flavor and env.cuda_driver and int(env.cuda_driver.split(".")[0]) < flavor:
        driver = {13: "r580", 12: "r535"}.get(flavor, "a newer driver")
        out.append((f"TensorRT is installed for CUDA {flavor}, but the NVIDIA driver supports CUDA "
                    f"{env.cuda_driver} only", f"install driver {driver} or newer, or the tensorrt-cu"
                    f"{int(env.cuda_driver.split('.')[0])} packages"))
    if env.cuda_runtime is None and env.tensorrt.importable:
        out.append(("CUDA runtime (libcudart) not found: verify and bench cannot allocate GPU buffers",
                    "pip install nvidia-cuda-runtime-cu12 (or -cu13), or put the CUDA toolkit's lib64 on LD_LIBRARY_PATH"))
    if env.packages.get("polygraphy") is None:
        out.append(("polygraphy not installed: verify and bench use its CUDA wrapper",
                    "pip install 'trtconv[trt]'"))
    return out


def installed_target() -> tuple[str, str]:
    """``--trt``'s default and why: TensorRT 10/11 if it imports, else TensorRT-RTX if installed, else the
    newest TensorRT (whose exit 9 then says how to install it). Imports ``tensorrt`` only where installed."""
    trt_status = probe_tensorrt(TENSORRT)
    if trt_status.importable and trt_status.version:
        major = trt_status.version.split(".")[0]
        target = next((t for t in TRT_TARGETS if t.split(".")[0] == major), NEWEST_TENSORRT)
        return target, f"TensorRT {trt_status.version} is installed"
    if importlib.util.find_spec(RTX.module) is not None:
        return RTX_TARGET, "TensorRT-RTX is installed and TensorRT 10/11 is not importable"
    return NEWEST_TENSORRT, "neither TensorRT nor TensorRT-RTX is installed"


# unavailable_hint's way out where TensorRT-RTX is installed; a build whose options RTX refuses drops it
RTX_ALTERNATIVE = ", or build with the TensorRT-RTX that is installed: add --trt rtx"


def unavailable_hint(flavour: Flavour) -> str:
    """How to get ``flavour``: never "install" what is installed (TensorRT missing, RTX there: use it)."""
    if flavour == TENSORRT and importlib.util.find_spec(RTX.module) is not None:
        return ("install TensorRT with `pip install tensorrt` (CUDA 13) or `pip install tensorrt-cu12` (CUDA 12)"
                + RTX_ALTERNATIVE)
    return flavour.install_hint
