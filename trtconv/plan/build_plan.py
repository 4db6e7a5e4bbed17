"""What to build, as plain data: the ``BuildPlan`` that ``trtconv.trt`` executes.

Everything a TensorRT build depends on is decided here, before TensorRT is imported,
so a bad flag fails in milliseconds and the plan can be written into the manifest.
Names (memory pools, compatibility levels) are TensorRT's enum member names in
lower case: enum *integers* were renumbered between 10.x and 11.x, names were not.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from trtconv.errors import UsageError
from trtconv.settings import NEWEST_TENSORRT, RTX_TARGET

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "int8")
HardwareCompat = Literal["none", "ampere+", "same-cc"]
HARDWARE_COMPAT: tuple[HardwareCompat, ...] = ("none", "ampere+", "same-cc")
# TensorRT MemoryPoolType members (both 10.16 and 11.4), lower case.
MEMORY_POOLS = (
    "workspace",
    "tactic_dram",
    "tactic_shared_memory",
    "dla_managed_sram",
    "dla_local_dram",
    "dla_global_dram",
)
DEFAULT_OPT_LEVEL = 3
DEFAULT_TARGET = NEWEST_TENSORRT  # a plan made without a target (tests); --trt's default is trtconv.settings
# TensorRT-RTX's ComputeCapability members (1.7) as "major.minor", and the set it builds when none
# is asked for (its portable set; an RTX runtime lists exactly these when it refuses an engine).
RTX_COMPUTE_CAPABILITIES = ("7.5", "8.0", "8.6", "8.9", "12.0", "12.1")
RTX_DEFAULT_COMPUTE_CAPABILITIES = ("8.0", "8.6", "8.9", "12.0", "12.1")
DEFAULT_MIN_PRECISION_SHARE = 0.5

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    """One input's min/opt/max shapes inside an optimization profile."""

    min: Shape
    opt: Shape
    max: Shape

    def to_json(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


@dataclass(frozen=True)
class Profile:
    """An optimization profile: every dynamic input's range (static inputs are not listed), and
    the range of *values* of each shape-tensor input (an integer input whose values TensorRT
    uses as a shape: ``set_shape_input``), flattened, min/opt/max element by element."""

    inputs: tuple[tuple[str, InputRange], ...]
    values: tuple[tuple[str, InputRange], ...] = ()

    def as_dict(self) -> dict[str, InputRange]:
        return dict(self.inputs)

    def corner(self, which: Literal["min", "opt", "max"]) -> dict[str, Shape]:
        return {name: getattr(rng, which) for name, rng in self.inputs}

    def value_corner(self, which: Literal["min", "opt", "max"]) -> dict[str, tuple[int, ...]]:
        """The shape-tensor inputs' values at one corner."""
        return {name: getattr(rng, which) for name, rng in self.values}

    def to_json(self) -> dict[str, dict[str, list[int]]]:
        return {name: rng.to_json() for name, rng in self.inputs}

    def values_json(self) -> dict[str, dict[str, list[int]]]:
        return {name: rng.to_json() for name, rng in self.values}


def target_name(target: str) -> str:
    """``--trt`` value as a user reads it: "TensorRT 11.4", "TensorRT-RTX"."""
    return "TensorRT-RTX" if target == RTX_TARGET else f"TensorRT {target}"


def default_cache_dir() -> Path:
    """Where persistent timing caches live: $TRTCONV_CACHE_DIR, else $XDG_CACHE_HOME/trtconv."""
    if os.environ.get("TRTCONV_CACHE_DIR"):
        return Path(os.environ["TRTCONV_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trtconv"


def timing_cache_path(cache_dir: Path, gpu_name: str, compute_capability: str, trt_version: str) -> Path:
    """One timing cache per GPU model and exact TensorRT build: caches do not transfer across either."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", gpu_name).strip("-").lower() or "gpu"
    return cache_dir / "timing-cache" / f"{slug}-sm{compute_capability.replace('.', '')}-trt{trt_version}.cache"


@dataclass(frozen=True)
class TimingCacheChoice:
    """The user's choice, resolved to a file by ``trtconv.trt`` once GPU and version are known."""

    path: Path | None = None  # explicit --timing-cache FILE
    enabled: bool = True
    cache_dir: Path = field(default_factory=default_cache_dir)

    def resolve(self, gpu_name: str, compute_capability: str, trt_version: str) -> Path | None:
        if not self.enabled:
            return None
        if self.path is not None:
            return self.path
        return timing_cache_path(self.cache_dir, gpu_name, compute_capability, trt_version)


@dataclass(frozen=True)
class BuildPlan:
    """Everything the TensorRT builder is told, and nothing it is not."""

    onnx_path: Path
    engine_path: Path
    precision: Precision = "fp32"
    profiles: tuple[Profile, ...] = ()
    memory_pools: tuple[tuple[str, int], ...] = ()  # (pool name, bytes)
    timing_cache: TimingCacheChoice = field(default_factory=lambda: TimingCacheChoice())
    optimization_level: int = DEFAULT_OPT_LEVEL
    hardware_compat: HardwareCompat = "none"
    version_compatible: bool = False
    exclude_lean_runtime: bool = False
    plugin_libraries: tuple[Path, ...] = ()
    min_precision_share: float = DEFAULT_MIN_PRECISION_SHARE
    max_aux_streams: int | None = None
    force: bool = False
    target: str = DEFAULT_TARGET  # "10.16" | "11.4" | "rtx"
    compute_capabilities: tuple[str, ...] = ()  # RTX only; () = RTX's default portable set

    def build_targets(self) -> tuple[str, ...]:
        """The compute capabilities an RTX engine is built for (what the manifest records)."""
        if self.target != RTX_TARGET:
            return ()
        return self.compute_capabilities or RTX_DEFAULT_COMPUTE_CAPABILITIES

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["onnx_path"] = str(self.onnx_path)
        d["engine_path"] = str(self.engine_path)
        d["profiles"] = [p.to_json() for p in self.profiles]
        d["shape_input_values"] = [p.values_json() for p in self.profiles]
        d["memory_pools"] = {name: size for name, size in self.memory_pools}
        d["timing_cache"] = {
            "enabled": self.timing_cache.enabled,
            "path": str(self.timing_cache.path) if self.timing_cache.path else None,
        }
        d["plugin_libraries"] = [str(p) for p in self.plugin_libraries]
        return d


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"4G"``, ``"512MiB"``, ``"1048576"`` → bytes (binary units: memory pools are powers of two)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"bad size {text!r}", hint="write e.g. 4G, 512M, 1048576")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_memory_pools(specs: tuple[str, ...] | list[str]) -> tuple[tuple[str, int], ...]:
    """``("workspace:4G", "tactic_shared_memory:48K")`` → sorted ((pool, bytes), ...)."""
    pools: dict[str, int] = {}
    for spec in specs:
        for item in (s for s in spec.split(",") if s.strip()):
            name, sep, size = item.partition(":")
            if not sep and "=" in item:
                name, _, size = item.partition("=")
            name = name.strip().lower().replace("-", "_")
            if name not in MEMORY_POOLS:
                raise UsageError(
                    f"unknown memory pool {name!r}", hint=f"pools are: {', '.join(MEMORY_POOLS)}"
                )
            if name in pools:
                raise UsageError(f"memory pool {name!r} given twice")
            pools[name] = parse_size(size)
    return tuple(sorted(pools.items()))


def parse_compute_capabilities(specs: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``("8.6", "sm89,12.0")`` → ("8.6", "8.9", "12.0"), each one TensorRT-RTX can target."""
    out: list[str] = []
    for spec in specs:
        for item in (s.strip().lower() for s in spec.split(",") if s.strip()):
            digits = item.removeprefix("sm").removeprefix("_")
            cc = digits if "." in digits else f"{digits[:-1]}.{digits[-1:]}" if digits.isdigit() and len(digits) >= 2 else item
            if cc not in RTX_COMPUTE_CAPABILITIES:
                raise UsageError(f"TensorRT-RTX cannot target compute capability {item!r}",
                                 hint=f"choose from {', '.join(RTX_COMPUTE_CAPABILITIES)} (default: "
                                 f"{' '.join(RTX_DEFAULT_COMPUTE_CAPABILITIES)}); Hopper/Blackwell data-centre "
                                 "GPUs (9.0, 10.x) are not RTX targets")
            if cc not in out:
                out.append(cc)
    return tuple(out)


def validate_plan(plan: BuildPlan) -> None:
    """Checks that need no model: levels, shares, plugin files present."""
    if plan.precision not in PRECISIONS:
        raise UsageError(f"unknown precision {plan.precision!r}", hint="use fp32, fp16 or int8")
    if not 0 <= plan.optimization_level <= 5:
        raise UsageError(f"optimization level {plan.optimization_level} is outside 0..5")
    if plan.hardware_compat not in HARDWARE_COMPAT:
        raise UsageError(f"unknown hardware compatibility {plan.hardware_compat!r}",
                         hint=f"use one of {', '.join(HARDWARE_COMPAT)}")
    if not 0.0 <= plan.min_precision_share <= 1.0:
        raise UsageError("--min-precision-share must lie between 0 and 1")
    if plan.exclude_lean_runtime and not plan.version_compatible:
        raise UsageError("--exclude-lean-runtime needs --version-compatible")
    if plan.target == RTX_TARGET:
        _validate_rtx(plan)
    elif plan.compute_capabilities:
        raise UsageError("--compute-capability applies to TensorRT-RTX only",
                         hint="use --trt rtx, or --hardware-compat for TensorRT")
    for lib in plan.plugin_libraries:
        if not lib.is_file():
            raise UsageError(f"plugin library {lib} not found", hint="give the path of a .so file")


def _validate_rtx(plan: BuildPlan) -> None:
    """What TensorRT-RTX has no use for: fail in milliseconds, not inside its builder."""
    if plan.plugin_libraries:
        raise UsageError("TensorRT-RTX cannot load plugin libraries (--plugins)",
                         hint="rewrite plugin nodes into standard ONNX (`trtconv check --trt rtx` lists them)")
    if plan.hardware_compat != "none" or plan.version_compatible:
        raise UsageError("--hardware-compat and --version-compatible are TensorRT options; TensorRT-RTX "
                         "targets compute capabilities", hint="use --compute-capability, e.g. 8.6,8.9")
    if plan.timing_cache.path is not None:
        raise UsageError("TensorRT-RTX has no timing cache (--timing-cache)",
                         hint="drop the flag: RTX compiles kernels on the user's GPU, where a runtime cache "
                         "plays that role (docs/build.md)")
    parse_compute_capabilities(list(plan.compute_capabilities))
