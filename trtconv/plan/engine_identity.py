"""An engine's identity: one hash over what decides its bytes, and the checks that use it.

An engine is the product of the ONNX, the build settings, the TensorRT that built it, the
plugin libraries it was built against and the target (the GPU, or an RTX build's compute
capabilities). Change any and it is another engine, so the manifest records the material
and its hash, the result cache keys on the hash, and ``trtconv inspect`` and the cache refuse
an engine whose recorded identity does not hold (edited manifest, swapped engine, a plugin
library that changed on disk). Pure functions over plain data: no TensorRT here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

IDENTITY_SCHEMA = 1


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plugin_fingerprints(libraries: Iterable[Path],
                        creators: Mapping[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
    """Each plugin library's file name, path, sha256 and (when TensorRT loaded it) the creators it registered."""
    out = []
    for lib in libraries:
        entry: dict[str, Any] = {"file": Path(lib).name, "path": str(lib),
                                 "sha256": file_sha256(Path(lib)) if Path(lib).is_file() else None}
        if creators is not None:
            entry["creators"] = list(creators.get(str(lib), []))
        out.append(entry)
    return out


def identity_material(*, onnx_sha256: str, settings: Mapping[str, Any], tensorrt: str | None, flavour: str,
                      plugins: Sequence[Mapping[str, Any]], target: Mapping[str, Any]) -> dict[str, Any]:
    """What the identity hash covers. Plugins by content (sha256), not by path or creators:
    the same library copied elsewhere builds the same engine."""
    return {
        "schema": IDENTITY_SCHEMA,
        "onnx_sha256": onnx_sha256,
        "settings": dict(settings),
        "tensorrt": {"flavour": flavour, "version": tensorrt},
        "plugins": [{"file": p.get("file"), "sha256": p.get("sha256")} for p in plugins],
        "target": dict(target),
    }


def identity_hash(material: Mapping[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity(material: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's ``identity`` section."""
    return {"hash": identity_hash(material), "material": dict(material)}


def identity_problems(manifest: Mapping[str, Any], engine_path: Path | None = None,
                      expected_hash: str | None = None) -> list[str]:
    """Why this manifest's identity does not hold, in words; empty when it does.

    Checks that the engine file is the one the manifest hashed, that the recorded material
    still hashes to the recorded identity, that plugin libraries still on disk at their
    recorded path are unchanged, and (``expected_hash``) that it is the engine asked for."""
    out = []
    engine = manifest.get("engine") or {}
    if engine_path is not None and engine.get("sha256") and Path(engine_path).is_file():
        actual = file_sha256(Path(engine_path))
        if actual != engine["sha256"]:
            out.append(f"{Path(engine_path).name} is not the engine its manifest describes (sha256 "
                       f"{actual[:12]}, manifest {str(engine['sha256'])[:12]})")
    ident = manifest.get("identity")
    if not isinstance(ident, Mapping) or not isinstance(ident.get("material"), Mapping):
        # an older trtconv's manifest: nothing to check, unless a particular identity was asked for
        return [*out, "its manifest records no engine identity"] if expected_hash is not None else out
    recomputed = identity_hash(ident["material"])
    if recomputed != ident.get("hash"):
        out.append(f"the manifest's identity material hashes to {recomputed[:12]}, not to its recorded "
                   f"identity {str(ident.get('hash'))[:12]} (the manifest was edited)")
    for lib in (manifest.get("plugins") or {}).get("details") or []:
        path = Path(str(lib.get("path") or ""))
        if lib.get("path") and path.is_file() and lib.get("sha256") and file_sha256(path) != lib["sha256"]:
            out.append(f"plugin library {path} changed since the build (sha256 {file_sha256(path)[:12]}, "
                       f"built against {str(lib['sha256'])[:12]})")
    if expected_hash is not None and ident.get("hash") != expected_hash:
        out.append(f"its identity {str(ident.get('hash'))[:12]} is not the one asked for ({expected_hash[:12]})")
    return out
