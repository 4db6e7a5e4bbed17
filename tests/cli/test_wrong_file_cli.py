"""An ONNX model given where an engine goes (`inspect`, `bench`, `verify`, `triton-repo`): a usage error
that says so, with a hint that builds it, never "TensorRT is not available" (exit 9) as it was."""

from __future__ import annotations

import shlex

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


@pytest.mark.parametrize("args", [["inspect"], ["bench"], ["verify", "--onnx", "{m}"], ["triton-repo", "-o", "{t}"]],
                         ids=["inspect", "bench", "verify", "triton-repo"])
def test_an_onnx_model_given_as_the_engine_is_a_usage_error_whose_hint_builds_it(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")
    argv = [args[0], "m.onnx", *(a.format(m="m.onnx", t="repo") for a in args[1:])]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "m.onnx is an ONNX model, not a TensorRT engine" in res.output
    assert "TensorRT is not available" not in res.output and "Traceback" not in res.output
    hint = res.output.split("hint: ", 1)[1].strip()
    assert hint == "trtconv build m.onnx -o m.engine"
    pytest.importorskip("tensorrt_rtx")  # the hint runs as printed (here the default target is TensorRT-RTX)
    built = CliRunner().invoke(cli, shlex.split(hint)[1:])
    assert built.exit_code == 0, built.output
