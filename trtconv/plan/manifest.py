"""The engine manifest: ``model.engine.json`` beside ``model.engine``.

A .engine file runs only with the TensorRT build, GPU architecture and plugins it was
made with, and says none of that itself. The manifest records it, plus where the
engine came from (ONNX hash, rewrites, precision, calibration) and what it was
measured to do (verify, bench). Keys are sorted and every value is derived from the
inputs, except the fields listed in ``VOLATILE_FIELDS`` (wall-clock time), so two
builds of the same thing give manifests that differ only there.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtconv import __version__
from trtconv.errors import DataError
from trtconv.outputs import write_json
from trtconv.plan.build_plan import RTX_TARGET, BuildPlan

SCHEMA_VERSION = 1
VOLATILE_FIELDS = ("created_at", "build.seconds", "bench")


def manifest_path(engine_path: Path) -> Path:
    return Path(str(engine_path) + ".json")


def build_manifest(
    plan: BuildPlan,
    *,
    onnx_sha256: str,
    environment: Mapping[str, Any],
    source_onnx: str | None = None,
    rewrites: list[dict[str, Any]] | None = None,
    rewrite_drift: Mapping[str, Any] | None = None,
    dtype_changes: list[dict[str, Any]] | None = None,
    precision: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
    plugins_needed: list[str] | None = None,
    build_seconds: float | None = None,
    created_at: str | None = None,
    engine_sha256: str | None = None,
    verify: Mapping[str, Any] | None = None,
    bench: Mapping[str, Any] | None = None,
    identity: Mapping[str, Any] | None = None,
    layers: Mapping[str, Any] | None = None,
    bindings: list[dict[str, Any]] | None = None,
    plugin_details: list[dict[str, Any]] | None = None,
    split: Mapping[str, Any] | None = None,
    rewrites_stepped_aside: list[dict[str, Any]] | None = None,
    parser_disagreements: list[dict[str, Any]] | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """The manifest as a JSON-ready dict. ``environment`` holds the TensorRT, CUDA and driver
    versions and the GPU name and compute capability (from ``trtconv.trt``), and ``gpu_properties``
    (SM count, memory) where a GPU exists; ``identity`` is ``trtconv.plan.engine_identity.identity(...)``;
    ``layers`` the layer table (``source``: engine or network, ``layers``) ``trtconv inspect`` shows.
    Over 80 lines: one keyword per manifest section, and the sections as one literal."""
    return {
        "schema": SCHEMA_VERSION,
        "trtconv": __version__,
        "created_at": created_at,
        "environment": {
            "tensorrt": environment.get("tensorrt"),
            "tensorrt_flavour": environment.get("tensorrt_flavour", "TensorRT"),
            "cuda_runtime": environment.get("cuda_runtime"),
            "cuda_driver": environment.get("cuda_driver"),
            "driver": environment.get("driver"),
            "gpu": environment.get("gpu"),
            "compute_capability": environment.get("compute_capability"),
            "gpu_properties": environment.get("gpu_properties"),
        },
        "identity": dict(identity) if identity else None,
        "layers": dict(layers) if layers else None,
        "bindings": list(bindings) if bindings is not None else None,
        # The user's model (hashed with its external data) and the prepared ONNX TensorRT parsed.
        "source": {"onnx": source_onnx or plan.onnx_path.name, "onnx_sha256": onnx_sha256,
                   "prepared_onnx": plan.onnx_path.name},
        "engine": {"file": plan.engine_path.name, "sha256": engine_sha256},
        "rewrites": list(rewrites or []),
        # rewrites dropped because their proof failed: the node stayed as it was, and the parser took it
        "rewrites_stepped_aside": list(rewrites_stepped_aside or []),
        # nodes `check` predicted the parser would refuse that the real parser (and builder) took
        "parser_disagreements": list(parser_disagreements or []),
        # the whole model against the original where a rule changed the numbers on purpose
        "rewrite_drift": dict(rewrite_drift) if rewrite_drift is not None else None,
        # inputs/outputs whose element type a rewrite changed (float64 -> float32): never silent
        "dtype_changes": list(dtype_changes or []),
        "precision": {"requested": plan.precision, **dict(precision or {})},
        "calibration": dict(calibration) if calibration else None,
        "profiles": [p.to_json() for p in plan.profiles],
        "shape_input_values": [p.values_json() for p in plan.profiles],  # per profile: set_shape_input's values
        "plugins": {
            "libraries": [p.name for p in plan.plugin_libraries],
            "needed_at_runtime": sorted(plugins_needed or []),
            "details": list(plugin_details or []),  # file, path, sha256, creators: part of the identity
        },
        "build": {
            # the command that built it, paths as typed (relative to where it ran): what a rebuild runs
            "command": command,
            "seconds": round(build_seconds, 3) if build_seconds is not None else None,
            "optimization_level": plan.optimization_level,
            "memory_pools": dict(plan.memory_pools),
            "hardware_compat": plan.hardware_compat,
            "version_compatible": plan.version_compatible,
            "exclude_lean_runtime": plan.exclude_lean_runtime,
            # TensorRT-RTX has no timing cache (a deprecated no-op there): never used, recorded as off.
            "timing_cache": plan.timing_cache.enabled and plan.target != RTX_TARGET,
            "target": plan.target,
            # RTX: the compute capabilities the engine runs on (kernels compiled there at first run).
            "compute_capabilities": list(plan.build_targets()) or None,
        },
        "verify": dict(verify) if verify else None,
        "bench": dict(bench) if bench else None,
        # --split-tail: the engine is the model's head; the tail ONNX (for ONNX Runtime) computes the rest
        "split": dict(split) if split else None,
    }


def rebuild_hint(manifest: Mapping[str, Any], where: str = "") -> str:
    """How to rebuild the engine ``manifest`` describes: the command that built it, runnable as printed from
    the directory it ran in (``--force``: the old engine is replaced); manifests before the command was
    recorded get the command's start and the source's name."""
    command = str((manifest.get("build") or {}).get("command") or "")
    if command:
        force = "" if "--force" in shlex.split(command) else " --force"
        return f"rebuild it{where} from the directory it was built in: `{command}{force}`"
    source = str((manifest.get("source") or {}).get("onnx") or "MODEL.onnx")
    engine = str((manifest.get("engine") or {}).get("file") or "MODEL.engine")
    return f"rebuild it{where}: `trtconv build {shlex.quote(source)} -o {shlex.quote(engine)} --force` and the options it was built with"


def write_manifest(path: Path, manifest: Mapping[str, Any], *, force: bool = False) -> None:
    write_json(path, dict(manifest), force=force)


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not a trtconv manifest: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
        raise DataError(f"{path} is not a trtconv manifest (schema {SCHEMA_VERSION})")
    return data


def update_manifest(path: Path, **sections: Any) -> dict[str, Any]:
    """Add ``verify``/``bench`` results to an existing manifest, atomically."""
    data = read_manifest(path)
    data.update(sections)
    write_json(path, data, force=True)
    return data


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def runtime_mismatches(manifest: Mapping[str, Any], tensorrt: str | None, compute_capability: str | None) -> list[str]:
    """Why this engine cannot run here, from its manifest, before TensorRT fails with "engine plan
    file is generated on an incompatible device" or a serialization version error.

    Plans need the exact TensorRT build unless built version-compatible (then a later runtime,
    10.x → 11.x included, works); the same compute capability unless built hardware-compatible
    (``ampere+``: any sm 8.0 or newer)."""
    env = manifest.get("environment") or {}
    build = manifest.get("build") or {}
    out = []
    built_trt, built_cc = env.get("tensorrt"), env.get("compute_capability")
    if build.get("target") == RTX_TARGET:
        targets = build.get("compute_capabilities") or []
        if compute_capability and targets and compute_capability not in targets:
            out.append(f"a TensorRT-RTX engine built for compute capabilities {' '.join(targets)}; this GPU has "
                       f"{compute_capability} (RTX engines do not run on data-centre GPUs such as Hopper)")
        return out
    if built_trt and tensorrt and built_trt != tensorrt:
        if not build.get("version_compatible"):
            out.append(f"built with TensorRT {built_trt}, this is TensorRT {tensorrt} (engines need the same "
                       "version unless built with --version-compatible)")
        elif _version_tuple(tensorrt) < _version_tuple(built_trt):
            out.append(f"built with TensorRT {built_trt}; version-compatible engines run on that version or "
                       f"later, this is {tensorrt}")
    if built_cc and compute_capability and built_cc != compute_capability:
        level = build.get("hardware_compat", "none")
        if level == "ampere+":
            if float(compute_capability) < 8.0:
                out.append(f"built for Ampere and newer GPUs; this GPU is sm {compute_capability}")
        else:
            out.append(f"built for compute capability {built_cc}, this GPU has {compute_capability} (rebuild "
                       "here, or build with --hardware-compat ampere+)")
    return out
