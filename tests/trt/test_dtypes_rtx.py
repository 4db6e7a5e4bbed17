"""A uint8-input model and a float64 model build on TensorRT-RTX with one `trtconv build`, and the
manifest says which inputs and outputs changed type."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rewrites"))
from test_dtypes import float64_model, uint8_image_model  # noqa: E402


def _build(model: onnx.ModelProto, tmp_path: Path) -> dict:
    src, engine = tmp_path / "m.onnx", tmp_path / "m.engine"
    onnx.save(model, str(src))
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(src), "-o", str(engine)])
    assert res.exit_code == 0, res.output
    return json.loads(Path(str(engine) + ".json").read_text())


def test_uint8_input_model_builds_and_keeps_uint8(tmp_path):
    m = _build(uint8_image_model(), tmp_path)
    assert [r["rule"] for r in m["rewrites"]] == ["uint8-input-cast"] and m["dtype_changes"] == []
    prepared = onnx.load(str(tmp_path / "m.prepared.onnx"))
    assert prepared.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8


def test_float64_model_builds_and_the_manifest_says_its_types_changed(tmp_path):
    m = _build(float64_model(), tmp_path)
    assert [(c["kind"], c["name"], c["before"], c["after"]) for c in m["dtype_changes"]] == [
        ("input", "x", "float64", "float32"), ("output", "y", "float64", "float32")]
