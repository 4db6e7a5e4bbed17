"""`check --trt rtx`: TensorRT-RTX's own support table (the 11.x parser without any plugin)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.analyze import analyze
from trtconv.analyze.support import load_table
from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import load_model

F = TensorProto.FLOAT


def _save(tmp_path: Path, nodes, inputs, domains=()) -> Path:
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)])
    opsets = [helper.make_opsetid("", 19)] + [helper.make_opsetid(d, 1) for d in domains]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=9), path)
    return path


def _check(path: Path, target: str):
    return analyze(load_model(path, structure_only=True), target, {})


def test_rtx_table_keeps_the_11x_operators_and_drops_every_plugin():
    rtx, v11 = load_table("rtx"), load_table("11.4")
    assert rtx.lookup("", "Conv").status == "supported" and rtx.lookup("", "Swish").status == "supported"
    assert not rtx.loads_plugins and v11.loads_plugins
    assert {r.status for r in rtx.any_domain.values() if r.domain == "*" and r.op_type in v11.any_domain
            and v11.any_domain[r.op_type].is_plugin} == {"removed-plugin"}
    changed = {k for k in v11.ops if v11.ops[k].status != rtx.ops[k].status}
    assert changed == {"DeformConv", "DFT", "NonZero"}  # NonZero: imported through a plugin RTX lacks (measured)
    assert all(rtx.ops[k].source.startswith("TensorRT-RTX") for k in changed)
    # measured (tools/oracle): Attention and NonMaxSuppression parse; RTX's ahead-of-time build fails them
    for op in ("Attention", "NonMaxSuppression"):
        assert rtx.ops[op].status == "supported" and rtx.ops[op].param("no_rtx_kernel")
        assert "measured with TensorRT-RTX" in rtx.ops[op].source


def _deform(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", F, [1, 2, 8, 8])
    w = helper.make_tensor_value_info("w", F, [4, 2, 3, 3])
    off = helper.make_tensor_value_info("off", F, [1, 18, 8, 8])
    return _save(tmp_path, [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="dc", pads=[1, 1, 1, 1])],
                 [x, w, off])


def test_deformconv_is_supported_on_11x_and_rewritable_on_rtx(tmp_path):
    """TensorRT imports DeformConv as a plugin; RTX has none, so DCN goes through the plugin-free rewrite."""
    path = _deform(tmp_path)
    assert _check(path, "11.4").exit_code == ExitCode.OK
    rtx = _check(path, "rtx")
    node = next(n for n in rtx.nodes if n.op_type == "DeformConv")
    assert node.status == "rewritable" and node.rewrite == "deformconv"
    assert rtx.exit_code == ExitCode.NEEDS_REWRITE


def test_unknown_custom_op_needs_a_plugin_on_11x_but_is_unsupported_on_rtx(tmp_path):
    x = helper.make_tensor_value_info("x", F, [4])
    path = _save(tmp_path, [helper.make_node("MyOp", ["x"], ["y"], domain="acme", name="mine")], [x], ["acme"])
    assert next(n for n in _check(path, "11.4").nodes if n.op_type == "MyOp").status == "plugin"
    rtx = _check(path, "rtx")
    node = next(n for n in rtx.nodes if n.op_type == "MyOp")
    assert node.status == "unsupported" and "loads no plugins" in node.findings[0].message
    assert rtx.exit_code == ExitCode.UNSUPPORTED


def test_check_cli_accepts_trt_rtx(tmp_path):
    res = CliRunner().invoke(cli, ["check", str(_deform(tmp_path)), "--trt", "rtx", "--json"])
    assert res.exit_code == ExitCode.NEEDS_REWRITE, res.output
    assert '"rtx"' in res.stdout


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64])
def test_integer_clip_is_supported_on_rtx_and_builds(tmp_path, dtype):
    """The real RTX parser and builder take Clip on INT32/INT64 (measured): `check` called it
    unsupported ("accepts FP32, FP16, BF16") and `build` exited 5 (issue 33)."""
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    x = helper.make_tensor_value_info("x", dtype, [2, 4])
    g = helper.make_graph([helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")], "g", [x],
                          [helper.make_tensor_value_info("y", dtype, [2, 4])],
                          initializer=[numpy_helper.from_array(np.array(-3, np_type), "lo"),
                                       numpy_helper.from_array(np.array(5, np_type), "hi")])
    path = tmp_path / "clip.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    assert _check(path, "rtx").exit_code == ExitCode.OK
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(path), "-o", str(tmp_path / "clip.engine")])
    assert res.exit_code == 0, res.output
