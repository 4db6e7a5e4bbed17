"""benchmarks/build_coverage.py's driver, without the benchmark's ``bench`` extra: dynamic inputs get
``--shapes`` from the example, the rules and proofs come from trtconv's ``--json``, and the torchvision
exporter (run by a separate interpreter) imports with the standard library alone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from fused_builders import tiny_bert

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None
EXAMPLE = {"input_ids": (1, 8), "segment_ids": (1, 8), "mask": (1, 8)}


@pytest.fixture()
def bc(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import build_coverage

    return build_coverage


def test_only_dynamic_inputs_get_shapes(bc, tmp_path):
    dynamic, static = tmp_path / "dynamic.onnx", tmp_path / "static.onnx"
    onnx.save(tiny_bert(batch="batch", seq="seq"), dynamic)
    onnx.save(tiny_bert(), static)
    assert bc.dynamic_shapes(dynamic, EXAMPLE) == EXAMPLE
    assert bc.dynamic_shapes(static, EXAMPLE) == {}


@pytest.mark.skipif(not HAVE_RTX, reason="needs tensorrt_rtx")
def test_fused_bert_row_bare_rtx_refuses_trtconv_builds_with_its_rules(bc, tmp_path):
    path = tmp_path / "bert.onnx"
    onnx.save(tiny_bert(batch="batch", seq="seq"), path)
    shapes = bc.dynamic_shapes(path, EXAMPLE)
    assert bc.bare_rtx(path, shapes).startswith("parse fails: EmbedLayerNormalization")
    verdict, rules, worst = bc.trtconv_rtx(path, tmp_path, shapes)
    assert verdict == "builds"
    assert "ms-attention x2" in rules and "ms-embed-layernorm x1" in rules
    assert 0.0 <= float(worst) <= 1.0


def test_torchvision_exporter_imports_without_site_packages():
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import coverage_torchvision as t; print(t.kind('resnet18'))"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "classifier"


@pytest.mark.skipif(not HAVE_RTX, reason="needs tensorrt_rtx")
def test_a_shape_tensor_input_gets_its_values_in_both_builds(bc, tmp_path, monkeypatch):
    """The torch family's length-cut: its length input's value sets a shape; TensorRT builds it only with
    that value in the profile, given to the bare parser and (as ``--shapes length:[7]``) to trtconv."""
    pytest.importorskip("torch")
    import coverage_torch

    (g,) = coverage_torch.generate(tmp_path, lambda n: n == "length-cut")
    assert g.path is not None, g.error
    values = dict(g.values)
    assert values == {"length": (7,)}
    assert bc.bare_rtx(g.path, values=values) == "builds"  # without: "missing values for shape input tensor"
    assert bc.trtconv_rtx(g.path, tmp_path, values=values)[0] == "builds"
