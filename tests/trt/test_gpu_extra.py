"""The GPU tests' own needs come with the project: every module the DCNv2 GPU and TensorRT tests
import is a dependency of trtconv or of its `test` or `gpu` extra (make install adds `gpu` where
a GPU is visible), so on a user's GPU machine they run instead of skipping."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from trtconv.cli.config import tomllib

ROOT = Path(__file__).resolve().parents[2]
GPU_TESTS = ("test_dcnv2_gpu.py", "test_dcnv2_plugin.py")
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"cupy": "cupy-cuda13x", "tensorrt": "tensorrt", "onnx_graphsurgeon": "onnx-graphsurgeon"}


def _imported(path: Path) -> set[str]:
    """Top-level modules a test file imports, importorskip included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
              and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value).split(".")[0])
    return names


def _requirement_names(reqs: list[str]) -> set[str]:
    return {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in reqs}


def test_gpu_tests_need_nothing_outside_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    provided = _requirement_names(project["dependencies"] + extras["test"] + extras["gpu"] + extras["trt"])
    third_party = set()
    for name in GPU_TESTS:
        third_party |= _imported(ROOT / "tests" / "trt" / name)
    third_party -= set(sys.stdlib_module_names) | {"trtconv", "pytest", "builders", "conftest"}
    missing = {m for m in third_party if DISTRIBUTIONS.get(m, m).replace("_", "-") not in provided}
    assert not missing, f"the GPU tests import {sorted(missing)}, which no extra of trtconv brings"
    assert "torchvision" not in third_party  # their reference is trtconv's own float64 one
    assert {"cupy-cuda13x", "torch"} <= _requirement_names(extras["gpu"])
