"""`trtconv build --trt rtx` of a RoiAlign model: the build names its target to the rewrite, which
applies the plugin-free RoiAlign there (TensorRT-RTX has no ROIAlign plugin): average mode with a fixed
sampling_ratio, max mode, and adaptive sampling (sampling_ratio=0) each build."""

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
from test_roi_align import roi_model, with_attrs  # noqa: E402


@pytest.mark.parametrize("attrs, form", [({}, "mean (2x2 samples"), ({"mode": "max"}, "largest weighted corner"),
                                         ({"sampling_ratio": 0}, "adaptive samples")])
def test_roi_align_model_builds_on_rtx_with_dynamic_boxes(tmp_path, attrs, form):
    src, engine = tmp_path / "roi.onnx", tmp_path / "roi.engine"
    onnx.save(with_attrs(roi_model(), **attrs), str(src))
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(src), "-o", str(engine), "--min-shapes", "rois:1x4",
                                   "--opt-shapes", "rois:8x4", "--max-shapes", "rois:64x4"])
    assert res.exit_code == 0, res.output
    m = json.loads(Path(str(engine) + ".json").read_text())
    (r,) = m["rewrites"]
    assert r["rule"] == "roialign-portable" and r["proof"]["passed"] and r["proof"]["outputs"][0]["max_abs"] < 1e-4
    assert form in r["target"], r
