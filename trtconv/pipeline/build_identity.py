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
    from trtconv.pipeline.build import BuildRequest

# Request fields that decide where files go or whether work is checked, never the engine's bytes.
# preflight and command: a pre-build check and the hints' text, not what is built
NOT_IDENTITY = frozenset({"model", "output", "prepared", "prepare_only", "verify", "plan", "preflight", "command",
                          "keep_prepared"})
PLAN_FIELDS = ("memory_pools", "optimization_level", "hardware_compat", "version_compatible",
               "exclude_lean_runtime", "min_precision_share", "max_aux_streams")


def identity_settings(req: BuildRequest) -> dict[str, Any]:
    """The request's settings as canonical JSON data (paths as given, tuples as lists)."""
    fields = {f.name: getattr(req, f.name) for f in dataclasses.fields(req) if f.name not in NOT_IDENTITY}
    if req.quantize is not None:
        fields["quantize"] = dataclasses.asdict(req.quantize)
    if req.plan is not None:
        fields.update({name: getattr(req.plan, name) for name in PLAN_FIELDS})
    return dict(json.loads(json.dumps(fields, sort_keys=True, default=str)))


def gpu_properties() -> dict[str, Any] | None:
    """What decides whether an engine runs on this GPU (None without one)."""
    cuda, gpus, _error = probe_driver()
    if not gpus:
        return None
    gpu = gpus[0]
    return {"name": gpu.name, "compute_capability": gpu.compute_capability, "memory_bytes": gpu.memory_bytes,
            "sm_count": gpu.sm_count, "cuda_driver": cuda}


def request_identity(req: BuildRequest, *, onnx_sha256: str | None = None,
                     plugins: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The identity material of the engine ``req`` builds (``identity_hash`` hashes it)."""
    if onnx_sha256 is None:
        onnx_sha256 = model_sha256(load_model(req.model, structure_only=True))
    flavour = for_target(req.target)
    plan_plugins = req.plan.plugin_libraries if req.plan is not None else ()
    if plugins is None:
        plugins = plugin_fingerprints(Path(p) for p in plan_plugins)
    if req.target == RTX_TARGET:
        targets = req.plan.build_targets() if req.plan is not None else ()
        target: dict[str, Any] = {"trt": req.target, "compute_capabilities": list(targets)}
    else:  # a TensorRT 10/11 engine is built for this GPU
        gpu = gpu_properties()
        target = {"trt": req.target, "gpu": None if gpu is None else [gpu["name"], gpu["compute_capability"]]}
    return identity_material(onnx_sha256=onnx_sha256, settings=identity_settings(req),
                             tensorrt=probe_tensorrt(flavour).version, flavour=flavour.name,
                             plugins=plugins, target=target)
