"""DCNv2 on TensorRT-RTX: no plugins there, so `build --trt rtx` rewrites DCN into standard ONNX operators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import dcn_model
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.pipeline.build_settings import PLUGIN_FREE_DCN, BuildSettings, rewrite_settings

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


def _build(*args: object):
    return CliRunner().invoke(cli, ["build", "--trt", "rtx", *[str(a) for a in args]])


def test_default_dcn_target_is_plugin_free_only_where_plugins_are_missing():
    assert BuildSettings().rewrite_settings("rtx").dcn_target == PLUGIN_FREE_DCN == "portable"
    assert BuildSettings().rewrite_settings("11.4").dcn_target == "deformconv"  # rewrite's own default
    assert BuildSettings(dcn_target="deformconv").rewrite_settings("rtx").dcn_target == "deformconv"  # the user's
    assert rewrite_settings({}, target="rtx").dcn_target == "portable"  # `rewrite --trt rtx` as build
    assert rewrite_settings({}).dcn_target == "deformconv" and rewrite_settings({}).target is None


def test_dcnv2_model_builds_a_real_rtx_engine_through_the_plugin_free_form(tmp_path):
    engine = tmp_path / "dcn.engine"
    res = _build(dcn_model(tmp_path / "dcn.onnx"), "-o", engine)
    assert res.exit_code == 0, res.output
    assert engine.stat().st_size > 0
    m = json.loads(Path(str(engine) + ".json").read_text())
    assert m["build"]["target"] == "rtx" and m["plugins"]["needed_at_runtime"] == []
    assert [(r["node"], r["target"]) for r in m["rewrites"]] == [("dcn0", "portable")]
    assert all(r["proof"]["passed"] for r in m["rewrites"])


def test_dcn_as_deformconv_is_refused_by_the_real_rtx_parser(tmp_path):
    """ONNX DeformConv needs TensorRT's plugin library: RTX's table predicts the refusal at the recheck, and
    RTX's own parser, asked because it is installed, confirms it in its words (exit 5)."""
    engine = tmp_path / "dcn.engine"
    res = _build(dcn_model(tmp_path / "dcn.onnx"), "-o", engine, "--dcn-target", "deformconv")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "TensorRT-RTX's parser (tensorrt_rtx" in res.output and "(DeformConv)" in res.output
    assert not engine.exists()
