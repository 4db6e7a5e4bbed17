"""The TensorRT boundary: only trtconv.trt may import tensorrt."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import trtconv

PKG_DIR = Path(trtconv.__file__).parent


def _modules() -> list[str]:
    names = ["trtconv"]
    for info in pkgutil.walk_packages([str(PKG_DIR)], prefix="trtconv."):
        if info.name == "trtconv.trt" or info.name.startswith("trtconv.trt."):
            continue
        names.append(info.name)
    return names


def test_no_module_outside_trt_loads_tensorrt():
    mods = [m for m in _modules() if m != "trtconv.__main__"]
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k == 'tensorrt' or k.startswith('tensorrt.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"tensorrt loaded by importing trtconv modules: {out.stdout}"
    assert len(mods) > 10


def test_tensorrt_imported_only_under_trt_package():
    offenders = []
    for path in PKG_DIR.rglob("*.py"):
        rel = path.relative_to(PKG_DIR)
        if rel.parts[0] == "trt":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n == "tensorrt" or n.startswith("tensorrt.") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"tensorrt imported outside trtconv/trt/: {offenders}"
