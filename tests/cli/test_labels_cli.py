"""Labels true to what happened (issue 35): no ``None`` printed as a precision, no exporter-made dim
names (``p2o.DynamicDimension.0``) printed as if they meant something; dynamic dims print as -1, named
ones by their name, in ``check``, ``build`` and ``inspect`` alike."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def _model(folder: Path, dims: list[int | str]) -> Path:
    """x [N, 3, 8, W] flattened to [N, 24 * W] by a Reshape whose shape the graph computes (a Mul on
    int64 dims: a compute layer with no float tensor), then Relu."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([3], np.int64), "three"),
             numpy_helper.from_array(np.array([24], np.int64), "c24")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n1"], name="batch", axis=0),
             helper.make_node("Gather", ["s", "three"], ["w"], name="width", axis=0),
             helper.make_node("Mul", ["w", "c24"], ["rest"], name="times24"),
             helper.make_node("Concat", ["n1", "rest"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
             helper.make_node("Relu", ["flat"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    path = folder / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _no_none(text: str) -> None:
    assert not re.search(r"\bNone\b", text), text
    assert "DynamicDimension" not in text, text


def test_paddle_made_dim_names_and_integer_layers_print_plainly(tmp_path):
    model = _model(tmp_path, ["p2o.DynamicDimension.0", 3, 8, "p2o.DynamicDimension.1"])
    res = _run("check", model, "--trt", "rtx")
    assert "│ x     │ [-1, 3, 8, -1] │" in res.stdout, res.stdout
    _no_none(res.output)

    engine = tmp_path / "m.engine"
    res = _run("build", model, "-o", engine, "--trt", "rtx", "--min-shapes", "x:1x3x8x4", "--opt-shapes",
               "x:1x3x8x16", "--max-shapes", "x:2x3x8x32")
    assert res.exit_code == 0, res.output
    _no_none(res.output)

    res = _run("inspect", engine)
    assert res.exit_code == 0, res.output
    _no_none(res.output)
    assert " input x: FLOAT [-1, 3, 8, -1]" in res.stdout
    assert "profile 0 x: min [1, 3, 8, 4] opt [1, 3, 8, 16] max [2, 3, 8, 32]" in res.stdout
    (counts,) = [x for x in res.stdout.splitlines() if x.startswith("compute layers by precision: ")]
    assert re.search(r"no float tensor \d+", counts) and "fp32" in counts, counts


def test_named_dims_keep_their_names(tmp_path):
    model = _model(tmp_path, ["batch", 3, 8, "width"])
    res = _run("check", model, "--trt", "rtx")
    assert "│ x     │ [batch, 3, 8, width] │" in res.stdout, res.stdout
