"""Lay out a Triton model repository: ``DIR/<name>/config.pbtxt`` and ``DIR/<name>/1/<plan>``.

One engine gives ``1/model.plan``. Engines built for several compute capabilities (one per
GPU, or RTX engines for different lists) are gathered into one model: one plan file per engine
and ``cc_model_filenames`` mapping each compute capability to its plan, which is how Triton's
TensorRT backend picks a plan per GPU. They must have the same inputs and outputs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtconv.errors import UsageError
from trtconv.outputs import atomic_path, check_output_path, os_error, write_text
from trtconv.triton.model_config import config_pbtxt

VERSION = "1"
# Triton's TensorRT backend deserializes plans with TensorRT's own runtime (libnvinfer): TensorRT-RTX
# plans are another format, which it cannot load, and Triton has no TensorRT-RTX backend.
SERVED_FLAVOUR = "TensorRT"


def unservable(flavour: str) -> str | None:
    """Why Triton cannot serve a plan built by ``flavour`` ("TensorRT", "TensorRT 10.16", "TensorRT-RTX"),
    or None if it can."""
    if flavour.split(" ")[0] == SERVED_FLAVOUR:
        return None
    return (f"Triton's TensorRT backend loads TensorRT 10/11 plans, not {flavour} ones, so a Triton model "
            "repository of this engine could not be served")


@dataclass(frozen=True)
class PlanSource:
    """One engine and what its manifest says about it."""

    engine: Path
    bindings: Sequence[Mapping[str, Any]]
    profiles: Sequence[Mapping[str, Any]]
    compute_capabilities: tuple[str, ...]  # what the engine runs on (empty: unknown)
    flavour: str = "TensorRT"  # the TensorRT that built it: "TensorRT" or "TensorRT-RTX"
    shape_inputs: tuple[str, ...] = ()  # inputs whose values set shapes (Triton: is_shape_tensor)


def model_name(engine: Path) -> str:
    """A Triton model name from an engine file name: ``det.engine`` -> ``det``."""
    stem = engine.name[: -len(".engine")] if engine.name.endswith(".engine") else engine.stem
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "model"


def _io(bindings: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, tuple[int, ...]]]:
    return sorted((str(b["mode"]), str(b["name"]), str(b["dtype"]), tuple(b["shape"])) for b in bindings)


def plan_files(sources: Sequence[PlanSource]) -> tuple[list[str], dict[str, str]]:
    """(plan file name per source, compute capability -> file) for the sources gathered."""
    if len(sources) == 1:
        return ["model.plan"], {}
    names: list[str] = []
    by_cc: dict[str, str] = {}
    for src in sources:
        if not src.compute_capabilities:
            raise UsageError(f"{src.engine.name}: its manifest names no compute capability, so Triton could not "
                             "pick it per GPU", hint="gather engines that trtconv built (ENGINE.json beside each)")
        name = "model_sm" + "_".join(cc.replace(".", "") for cc in src.compute_capabilities) + ".plan"
        names.append(name)
        for cc in src.compute_capabilities:
            if cc in by_cc:
                raise UsageError(f"compute capability {cc} is covered by two engines ({by_cc[cc]} and "
                                 f"{src.engine.name})", hint="gather one engine per compute capability")
            by_cc[cc] = name
    return names, by_cc


def write_repository(repo: Path, name: str, sources: Sequence[PlanSource], *, force: bool = False) -> Path:
    """Write ``repo/name/config.pbtxt`` and the plan(s); returns the model folder.

    Refuses engines Triton cannot load (TensorRT-RTX), engines whose inputs/outputs differ, and an
    existing model folder without ``force``; all before anything is written."""
    if not sources:
        raise UsageError("no engine to put in the Triton repository")
    for src in sources:
        why = unservable(src.flavour)
        if why is not None:
            raise UsageError(f"{src.engine.name}: {why}",
                             hint="build the engine for Triton with --trt 10.16 or --trt 11.4 (TensorRT and a GPU)")
    first = _io(sources[0].bindings)
    for src in sources[1:]:
        if _io(src.bindings) != first:
            raise UsageError(f"{src.engine.name} has other inputs/outputs than {sources[0].engine.name}: one Triton "
                             "model needs the same ones in every plan")
    model_dir = repo / name
    files, by_cc = plan_files(sources)
    if (model_dir / "config.pbtxt").exists():
        check_output_path(model_dir / "config.pbtxt", force=force)
    text = config_pbtxt(name, sources[0].bindings, sources[0].profiles, default_model_filename=files[0],
                        cc_model_filenames=by_cc, shape_inputs=sources[0].shape_inputs)
    version = model_dir / VERSION
    try:
        version.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(version, exc) from exc
    for src, filename in zip(sources, files):
        with atomic_path(version / filename, force=True) as tmp:
            shutil.copyfile(src.engine, tmp)
    write_text(model_dir / "config.pbtxt", text, force=True)  # last: a config names plans that exist
    return model_dir
