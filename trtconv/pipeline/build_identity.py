"""A build request's engine identity (``trtconv.plan.engine_identity``), computed the same way before a
build (the result cache's key) and during it (the manifest), so that the two always agree."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtconv.load import load_model, model_sha256
from trtconv.plan import RTX_TARGET, identity_material, plugin_fingerprints
from trtconv.trt import for_target, probe_driver, probe_tensorrt

if TYPE_CHECKING:
    from trtconv.pipeline.build_settings import BuildSettings
    from trtconv.plan import BuildPlan

# Settings that decide where files go or whether work is checked, never the engine's bytes (keep_prepared:
# what a failed build leaves; no_preflight: a pre-build check); and those the identity takes from the plan
# (PLAN_FIELDS, the target's compute capabilities) or from the plugin libraries' bytes (plugins), so that
# two spellings of one engine have one identity. The hints' command line is no setting (build's ``command``).
NOT_IDENTITY = frozenset({"prepared", "prepare_only", "keep_prepared", "no_verify", "no_preflight", "timing_cache",
                          "no_timing_cache", "plugins", "workspace", "memory_pool", "opt_level", "hardware_compat",
                          "version_compatible", "exclude_lean_runtime", "min_precision_share",
                          "compute_capability"})
PLAN_FIELDS = ("memory_pools", "optimization_level", "hardware_compat", "version_compatible",
               "exclude_lean_runtime", "min_precision_share", "max_aux_streams")


def identity_settings(settings: BuildSettings, target: str, plan: BuildPlan) -> dict[str, Any]:
    """The build's settings (``target`` for an unset ``trt``) and the plan's limits as canonical JSON data
    (paths as given, tuples as lists)."""
    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name not in NOT_IDENTITY}
    fields["trt"] = target
    fields.update({name: getattr(plan, name) for name in PLAN_FIELDS})
    return dict(json.loads(json.dumps(fields, sort_keys=True, default=str)))


def gpu_properties() -> dict[str, Any] | None:
    """What decides whether an engine runs on this GPU (None without one)."""
    cuda, gpus, _error = probe_driver()
    if not gpus:
        return None
    gpu = gpus[0]
    return {"name": gpu.name, "compute_capability": gpu.compute_capability, "memory_bytes": gpu.memory_bytes,
            "sm_count": gpu.sm_count, "cuda_driver": cuda}


def request_identity(model: Path, settings: BuildSettings, trt: str, plan: BuildPlan, *,
                     onnx_sha256: str | None = None,
                     plugins: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The identity material of the engine ``build(model, ..., settings, trt)`` makes with ``plan``
    (``identity_hash`` hashes it)."""
    if onnx_sha256 is None:
        onnx_sha256 = model_sha256(load_model(model, structure_only=True))
    flavour = for_target(trt)
    if plugins is None:
        plugins = plugin_fingerprints(Path(p) for p in plan.plugin_libraries)
    if trt == RTX_TARGET:
        target: dict[str, Any] = {"trt": trt, "compute_capabilities": list(plan.build_targets())}
    else:  # a TensorRT 10/11 engine is built for this GPU
        gpu = gpu_properties()
        target = {"trt": trt, "gpu": None if gpu is None else [gpu["name"], gpu["compute_capability"]]}
    return identity_material(onnx_sha256=onnx_sha256, settings=identity_settings(settings, trt, plan),
                             tensorrt=probe_tensorrt(flavour).version, flavour=flavour.name,
                             plugins=plugins, target=target)
