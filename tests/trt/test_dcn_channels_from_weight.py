"""The mmcv DCNv2 form whose input declares no channel count builds in one `build --trt rtx`
(issue 26, item 4): the portable form takes the channel count from the weight (its dim 1 is
C / group) when x's dim 1 is dynamic, as mmdeploy exports write it."""

from __future__ import annotations

import onnx
import pytest
from builders import dcn_node_model
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

# (C, Cout, k, H, W, stride, pads [t, l, b, r], dilation, group, deformable_group, mask, bias)
SPECS = {
    "plain": (8, 16, 3, 12, 12, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    "groups-dgroups-stride": (8, 8, 3, 11, 13, (2, 2), (1, 1, 1, 1), (1, 1), 2, 4, True, True),
}


def _dynamic_channels(model: onnx.ModelProto) -> onnx.ModelProto:
    for vi in model.graph.input:
        dim = vi.type.tensor_type.shape.dim[1]
        dim.ClearField("dim_value")
        dim.dim_param = f"C_{vi.name}"
    return model


@pytest.mark.parametrize("spec", list(SPECS), ids=list(SPECS))
def test_mmcv_form_without_declared_channels_builds_in_one_command(tmp_path, spec):
    pytest.importorskip("tensorrt_rtx")
    c, _, k, h, w, stride, pads, dil, _, dg, *_ = SPECS[spec]
    model, _ = dcn_node_model("mmcv", SPECS[spec], batch="N", spatial=False)
    path = tmp_path / "mmcv.onnx"
    onnx.save(_dynamic_channels(model), path)
    oh = (h + pads[0] + pads[2] - dil[0] * (k - 1) - 1) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (k - 1) - 1) // stride[1] + 1
    shapes = f"x:1x{c}x{h}x{w},offset:1x{2 * dg * k * k}x{oh}x{ow},mask:1x{dg * k * k}x{oh}x{ow}"
    res = CliRunner().invoke(cli, ["build", str(path), "-o", str(tmp_path / "mmcv.engine"), "--trt", "rtx",
                                   "--shapes", shapes])
    assert res.exit_code == ExitCode.OK, res.output
    assert (tmp_path / "mmcv.engine").stat().st_size > 10_000
