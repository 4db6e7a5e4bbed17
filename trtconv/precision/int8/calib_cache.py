"""TensorRT's text calibration cache, plus a key so a stale cache is never reused.

The cache file is exactly what TensorRT's calibrators write and read: a header line
``TRT-<version>-<Algorithm>`` then one ``<tensor>: <scale>`` line per tensor, the scale
as the 8 hex digits of its big-endian IEEE float32 bits. TensorRT's reader accepts no
other lines, so the key (model hash + data hash + method and its settings) lives in a
JSON sidecar ``<cache>.key.json``. A cache whose sidecar is missing or whose key differs
is a miss: calibration runs again and both files are rewritten.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtconv.errors import DataError
from trtconv.outputs import write_json, write_text

# mse and auto (the chosen candidate's scales) have no TensorRT calibrator: the legacy header, as percentile
ALGORITHM = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration", "percentile": "LegacyCalibration",
             "mse": "LegacyCalibration", "auto": "LegacyCalibration"}


def trt_version_number(version: str) -> int:
    """``"10.9"`` → 100900, ``"11.4.1"`` → 110401 (the number TensorRT 10+ prints in cache headers)."""
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0]
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


def encode_scale(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def decode_scale(text: str) -> float:
    return float(struct.unpack(">f", bytes.fromhex(text.strip().zfill(8)))[0])


def format_cache(scales: dict[str, float], method: str, trt_version: str) -> str:
    lines = [f"TRT-{trt_version_number(trt_version)}-{ALGORITHM[method]}"]
    lines += [f"{name}: {encode_scale(s)}" for name, s in sorted(scales.items())]
    return "\n".join(lines) + "\n"


def parse_cache(text: str, origin: str = "calibration cache") -> tuple[str, dict[str, float]]:
    """(header, scales). Tensor names may contain ':' — the value is after the last ': '."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("TRT-"):
        raise DataError(f"{origin}: not a TensorRT calibration cache (first line must start with TRT-)")
    scales: dict[str, float] = {}
    for n, line in enumerate(lines[1:], start=2):
        name, sep, value = line.rpartition(": ")
        try:
            if not sep or not name:
                raise ValueError(line)
            scales[name] = decode_scale(value)
        except (ValueError, struct.error) as exc:
            raise DataError(f"{origin}: line {n} is not 'tensor: hexscale' ({line[:60]!r})") from exc
    return lines[0], scales


def cache_key(model_sha256: str, data_sha256: str, method: str, params: Mapping[str, object]) -> str:
    blob = json.dumps({"model": model_sha256, "data": data_sha256, "method": method, "params": params},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".key.json")


def cache_files(path: Path) -> tuple[Path, Path]:
    """The files one calibration cache is: the cache TensorRT reads and its key sidecar."""
    return path, sidecar(path)


@dataclass(frozen=True)
class CacheInfo:
    path: str | None
    key: str
    hit: bool
    reason: str  # why it was a hit or a miss

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def read_cache(path: Path, key: str, needed: set[str]) -> tuple[dict[str, float] | None, str]:
    """Scales if ``path`` holds a cache for exactly ``key`` covering ``needed``; else (None, why not)."""
    path = Path(path)
    if not path.exists():
        return None, "no cache file yet"
    side = sidecar(path)
    if not side.exists():
        return None, f"{side.name} missing: cannot tell what the cache was computed from"
    try:
        meta = json.loads(side.read_text())
        text = path.read_text()
    except (OSError, ValueError) as exc:
        return None, f"unreadable cache ({exc})"
    if meta.get("key") != key:
        return None, "cache was computed from another model, data set or method"
    _, scales = parse_cache(text, str(path))
    missing = needed - set(scales)
    if missing:
        return None, f"cache lacks {len(missing)} tensor(s), e.g. {sorted(missing)[0]!r}"
    return scales, "key matches"


def cache_meta(path: Path | str | None) -> dict[str, Any]:
    """The key sidecar of the cache at ``path`` ({} when absent or unreadable): what a hit replays
    besides the scales (``method="auto"``'s choice and its bias correction)."""
    if not path:
        return {}
    try:
        meta = json.loads(sidecar(Path(path)).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def add_to_sidecar(path: Path | str, key: str, extra: Mapping[str, object]) -> None:
    """Add ``extra`` to the key sidecar of the cache at ``path`` when it is still the one for ``key``
    (what is decided after the scales are saved, e.g. a kept bias correction)."""
    meta = cache_meta(path)
    if meta.get("key") == key:
        write_json(sidecar(Path(path)), {**meta, **extra}, force=True)


def write_cache(path: Path, scales: dict[str, float], *, key: str, method: str, trt_version: str,
                meta: dict[str, object]) -> None:
    """Cache then sidecar, each atomically; a crash in between leaves a cache that reads as a miss."""
    path = Path(path)
    if sidecar(path).exists():
        sidecar(path).unlink()
    write_text(path, format_cache(scales, method, trt_version), force=True)
    write_json(sidecar(path), {"key": key, "method": method, **meta}, force=True)
