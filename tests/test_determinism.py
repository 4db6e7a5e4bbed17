"""Same inputs, same bytes: check --json, rewrite, quantize fp16 and int8, and the prepared
ONNX that build writes before TensorRT (all that can run here), run twice in
separate processes with different PYTHONHASHSEED (set and dict orders differ), the
calibration folders written in opposite orders (directory listing order differs).

The only fields allowed to differ are timings: JSON keys ending in ``seconds``
(documented in docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

SHAPES = "x:1x3x48x192"
TIMING = re.compile(rb'("[A-Za-z_]*seconds": )(?:[-0-9.eE+]+|\{[^{}]*\})')  # a time, or times by name


def _calib(folder: Path, reverse: bool) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(7)
    samples = [rng.random((1, 3, 48, 192), dtype=np.float32) for _ in range(8)]
    order = range(7, -1, -1) if reverse else range(8)
    for i in order:
        np.save(folder / f"sample_{i:02d}.npy", samples[i])
    return folder


def _script(model: Path, calib: Path) -> str:
    py = sys.executable
    m = str(model)
    return "\n".join([
        "set -e",
        # exit 4: its H and W share the dim name '?', which rewrite renames (docs/analyze.md)
        f"{py} -m trtconv check {m} --json --shapes {SHAPES} > check.json || [ $? -eq 4 ]",
        f"{py} -m trtconv rewrite {m} -o rewrite.onnx --json --shapes {SHAPES} > rewrite.json",
        f"{py} -m trtconv quantize {m} --precision fp16 --calib-data {calib} -o fp16.onnx --json "
        f"--shapes {SHAPES} > fp16.json",
        f"{py} -m trtconv quantize {m} --precision int8 --int8-unverified --calib-data {calib} -o int8.onnx --json "
        f"--shapes {SHAPES} > int8.json",
        # what build writes before TensorRT: the prepared ONNX
        f"{py} -m trtconv build {m} -o build.engine --precision fp16 --shapes {SHAPES} --no-timing-cache --trt 11.4 "
        "--prepare-only 2> build.err",
    ])


def _strip_timings(obj):
    if isinstance(obj, dict):
        return {k: _strip_timings(v) for k, v in obj.items() if not k.endswith("seconds")}
    if isinstance(obj, list):
        return [_strip_timings(v) for v in obj]
    return obj


def test_outputs_are_byte_identical_across_processes(tmp_path, ocr_cls):
    runs = []
    for name, hashseed, reverse in (("a", "1", False), ("b", "2024", True)):
        folder = tmp_path / name
        folder.mkdir()
        _calib(folder / "calib", reverse)
        env = {"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
               **{k: v for k, v in os.environ.items() if k == "OPENBLAS_NUM_THREADS"}}  # tests/conftest.py
        proc = subprocess.Popen(["sh", "-c", _script(ocr_cls, Path("calib"))], cwd=folder, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs.append((folder, proc))
    for folder, proc in runs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{folder.name}: {err[-3000:]}"
    a, b = (folder for folder, _ in runs)
    files = sorted(p.name for p in a.iterdir() if p.suffix in (".onnx", ".json", ".data"))
    assert {"check.json", "rewrite.onnx", "rewrite.json", "fp16.onnx", "fp16.json", "int8.onnx", "int8.json",
            "build.prepared.onnx"} <= set(files)
    assert files == sorted(p.name for p in b.iterdir() if p.suffix in (".onnx", ".json", ".data"))
    for name in files:
        da, db = (a / name).read_bytes(), (b / name).read_bytes()
        if name.endswith(".json"):
            assert _strip_timings(json.loads(da)) == _strip_timings(json.loads(db)), f"{name} differs"
            assert TIMING.sub(rb"\1null", da) == TIMING.sub(rb"\1null", db), f"{name} bytes differ"
        else:
            assert da == db, f"{name} differs between runs"
