"""``trtconv inspect ENGINE``: layers, I/O, profiles, what the engine needs, where it came from.

The layers come from the engine itself where TensorRT can deserialize it here (TensorRT
10/11 with a GPU: the engine inspector); otherwise (TensorRT-RTX, no GPU, no TensorRT) from
the layer table the manifest recorded at build time, and the result says so and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtconv.errors import BackendUnavailableError, DataError, InvalidModelError, UsageError
from trtconv.inspection.layers import layer_rows, off_precision
from trtconv.plan import identity_problems, manifest_path, read_manifest, rebuild_hint
from trtconv.trt import describe_engine, engine_flavour

RECORDED = {"network": "recorded at build time from the strongly typed network (a strongly typed build follows "
                       "these types; fused layers appear one by one)",
            "engine": "recorded at build time from the engine inspector"}


def _manifest(engine_path: Path) -> dict[str, Any] | None:
    path = manifest_path(engine_path)
    if not path.is_file():
        return None
    try:
        return read_manifest(path)
    except (DataError, OSError):
        return None


def requirements(manifest: Mapping[str, Any] | None, flavour: str) -> dict[str, Any]:
    """What the engine needs to run: TensorRT flavour and version, GPU, plugins."""
    env = (manifest or {}).get("environment") or {}
    build = (manifest or {}).get("build") or {}
    plugins = (manifest or {}).get("plugins") or {}
    return {
        "tensorrt_flavour": env.get("tensorrt_flavour", flavour),
        "tensorrt": env.get("tensorrt"),
        "version_compatible": build.get("version_compatible"),
        "hardware_compat": build.get("hardware_compat"),
        "compute_capability": env.get("compute_capability"),
        "compute_capabilities": build.get("compute_capabilities"),
        "gpu": env.get("gpu"),
        "plugins": plugins.get("needed_at_runtime") or [],
    }


def provenance(manifest: Mapping[str, Any]) -> dict[str, Any]:
    prec = manifest.get("precision") or {}
    return {
        "trtconv": manifest.get("trtconv"),
        "created_at": manifest.get("created_at"),
        "source": manifest.get("source"),
        "identity": (manifest.get("identity") or {}).get("hash"),
        "rewrites": len(manifest.get("rewrites") or []),
        "precision": {"requested": prec.get("requested"), "method": prec.get("method"),
                      "achieved": prec.get("achieved")},
        "calibration": manifest.get("calibration"),
        "environment": manifest.get("environment"),
        "build": manifest.get("build"),
        "plugins": manifest.get("plugins"),
        "verify": None if manifest.get("verify") is None else {"passed": (manifest.get("verify") or {}).get("passed")},
    }


def inspect_engine(engine_path: Path, plugin_libraries: tuple[Path, ...] = (), *, live: bool = True) -> dict[str, Any]:
    """Everything ``trtconv inspect`` shows, as JSON-ready data. Refuses (exit 3) an engine whose
    manifest identity does not hold; exit 9 when neither TensorRT nor a manifest can describe it."""
    engine_path = Path(engine_path)
    if not engine_path.is_file():
        raise UsageError(f"{engine_path} does not exist", hint="give the .engine file `trtconv build` wrote")
    manifest = _manifest(engine_path)
    if manifest is not None:
        problems = identity_problems(manifest, engine_path)
        if problems:
            raise InvalidModelError(f"{engine_path.name}: engine identity does not match its manifest: "
                                    + "; ".join(problems), hint=rebuild_hint(manifest))
    flavour, _ = engine_flavour(engine_path)
    described, why = None, "not tried (--no-live)"
    if live and flavour.inspects_engine:
        try:
            described = describe_engine(engine_path, flavour, plugin_libraries)
        except (BackendUnavailableError, InvalidModelError) as exc:
            why = exc.message
    elif live:
        why = f"{flavour.name} engines cannot be deserialized without an RTX GPU of their compute capabilities"
    if described is not None:
        layers, source = described["layers"], {"from": "engine", "note": "read now by the engine inspector"}
        bindings, profiles = described["bindings"], described["profiles"]
    elif manifest is not None and (manifest.get("layers") or {}).get("layers") is not None:
        recorded = str((manifest.get("layers") or {}).get("source"))
        layers = list((manifest.get("layers") or {}).get("layers") or [])
        source = {"from": "manifest", "recorded_from": recorded,
                  "note": f"{RECORDED.get(recorded, 'recorded at build time')}; the engine was not read here: {why}"}
        bindings, profiles = manifest.get("bindings") or [], manifest.get("profiles") or []
    else:
        raise BackendUnavailableError(
            f"cannot describe {engine_path.name}: {why}, and it has no manifest with a layer table",
            hint="inspect it where TensorRT and a GPU are, or rebuild it with this trtconv (which records the table)")
    rows = layer_rows(layers)
    prec = (manifest or {}).get("precision") or {}
    return {
        "engine": str(engine_path),
        "requires": requirements(manifest, flavour.name),
        "layers": {**source, "count": len(rows), "rows": rows},
        "off_precision": off_precision(rows, prec, str(source.get("recorded_from") or source["from"])) if prec else [],
        "bindings": bindings,
        "profiles": profiles,
        # per profile, the shape-tensor inputs' values (recorded at build; the engine is not asked)
        "shape_input_values": list((manifest or {}).get("shape_input_values") or []),
        "provenance": provenance(manifest) if manifest is not None else None,
    }
