"""0-d inputs and shape-tensor inputs, end to end (issue 33, Deliver 3).

A 0-d input (a conditioning scale, as optimum exports it) is fed as a 0-d array and written
``NAME:scalar``; a shape-tensor input (an integer input whose values TensorRT uses as a shape)
gets its values from ``--shapes NAME:[v,...]`` or from the samples, into the profile
(``set_shape_input``), the pre-flight and the manifest. Both build for real with TensorRT-RTX.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import mask_model
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode, UsageError
from trtconv.load import parse_shape_spec, shapes_text
from trtconv.onnxutil import shape_value_inputs
from trtconv.reference.ort import random_feeds

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _save(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def scalar_model(path: Path) -> Path:
    """y = x * scale, x of dynamic batch, scale a 0-d input."""
    return _save(path, [helper.make_node("Mul", ["x", "scale"], ["y"])],
                 [helper.make_tensor_value_info("x", F, ["n", 4]), helper.make_tensor_value_info("scale", F, [])],
                 [helper.make_tensor_value_info("y", F, ["n", 4])])


def _build(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", *[str(a) for a in args]])
    return res.exit_code, res.output


def test_shapes_syntax_writes_scalars_and_shape_tensor_values():
    shapes, values = parse_shape_spec("x:1x3,scale:scalar,t:,input:0:2x2,shp:[3, 4],n:[7]")
    assert shapes == {"x": (1, 3), "scale": (), "t": (), "input:0": (2, 2)}
    assert values == {"shp": (3, 4), "n": (7,)}
    assert parse_shape_spec(shapes_text(shapes, values)) == (shapes, values)
    for bad in ("shp:[3,a]", "x:1xa", "x:[1]y"):
        with pytest.raises(UsageError):
            parse_shape_spec(bad)


def test_random_feeds_of_a_0d_input_are_0d_arrays(tmp_path):
    feeds = random_feeds(onnx.load(scalar_model(tmp_path / "s.onnx")), {"x": (2, 4)})
    assert isinstance(feeds["scale"], np.ndarray) and feeds["scale"].shape == ()


@pytest.mark.parametrize("shapes", [(), ("--shapes", "x:2x4,scale:scalar")])
def test_a_0d_input_builds(tmp_path, shapes):
    """The pre-flight fed a NumPy scalar (ONNX Runtime: "Unable to handle object of type
    numpy.float32") and refused every profile (exit 2); ``--shapes`` could not write a scalar."""
    code, out = _build(scalar_model(tmp_path / "s.onnx"), "-o", tmp_path / "s.engine", *shapes)
    assert code == 0, out


def test_shape_tensor_input_values_from_the_command_line_reach_profile_preflight_and_manifest(tmp_path):
    model = mask_model(tmp_path / "m.onnx")
    assert shape_value_inputs(onnx.load(model)) == ("mask",)
    code, out = _build(model, "-o", tmp_path / "none.engine")
    assert code == ExitCode.USAGE and "'mask' are shape tensors" in out
    example = re.search(r"--shapes '([^']+)'", out)  # the hint's example runs as printed
    assert example and "mask:[1,1,1,1,1,1]" in example.group(1), out
    code, out = _build(model, "-o", tmp_path / "hint.engine", "--shapes", example.group(1))
    assert code == 0, out
    code, out = _build(model, "-o", tmp_path / "m.engine", "--shapes", "mask:[1,1,1,0,0,0]")
    assert code == 0, out
    manifest = json.loads((tmp_path / "m.engine.json").read_text())
    assert manifest["shape_input_values"] == [{"mask": {"min": [1, 1, 1, 0, 0, 0], "opt": [1, 1, 1, 0, 0, 0],
                                                        "max": [1, 1, 1, 0, 0, 0]}}]
    code, out = _build(model, "-o", tmp_path / "bad.engine", "--shapes", "mask:[1,1]")
    assert code == ExitCode.USAGE and "holds 6 value(s)" in out


def test_shape_tensor_input_values_from_the_samples(tmp_path):
    model = mask_model(tmp_path / "m.onnx")
    data = tmp_path / "data"
    data.mkdir()
    for i, length in enumerate((2, 5)):
        mask = (np.arange(6) < length).astype(np.int64)[None]
        np.savez(data / f"{i}.npz", x=np.ones((1, 6), np.float32), mask=mask)
    code, out = _build(model, "-o", tmp_path / "m.engine", "--calib-data", data)
    assert code == 0, out
    values = json.loads((tmp_path / "m.engine.json").read_text())["shape_input_values"][0]["mask"]
    assert values["min"] == [1, 1, 0, 0, 0, 0] and values["max"] == [1, 1, 1, 1, 1, 0]


def test_the_preflight_feeds_the_profiles_values(tmp_path):
    """Random values for a Reshape's target would fail ONNX Runtime (or run a shape TensorRT is never
    told); the corners run on the values the profile gives."""
    from trtconv.plan.build_plan import InputRange, Profile
    from trtconv.plan.corners import run_corners

    path = _save(tmp_path / "r.onnx", [helper.make_node("Reshape", ["x", "shp"], ["y"])],
                 [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("shp", I64, [2])],
                 [helper.make_tensor_value_info("y", F, ["a", "b"])])
    rng = InputRange((3, 4), (4, 3), (6, 2))
    runs = run_corners(onnx.load(path), (Profile((), (("shp", rng),)),), keep_outputs=True)
    assert not runs.failures and not runs.value_failures
    (feeds, outputs), = runs.outputs.values()  # kept per input shapes: the min corner's
    assert feeds["shp"].tolist() == [3, 4] and outputs["y"].shape == (3, 4)
    bad = InputRange((3, 4), (4, 3), (5, 2))  # max: 10 elements from 12, a corner ONNX Runtime refuses
    runs = run_corners(onnx.load(path), (Profile((), (("shp", bad),)),))
    assert [f.corner for f in runs.failures] == ["max"]


def test_check_live_gives_the_probe_the_shape_tensor_values(tmp_path):
    """Without them the real builder refuses ("missing values for shape input tensor") and `check --live`
    reported a disagreement on a model that builds."""
    model = mask_model(tmp_path / "m.onnx")
    res = CliRunner().invoke(cli, ["check", "--trt", "rtx", "--live", str(model), "--shapes", "mask:[1,1,1,0,0,0]"])
    assert res.exit_code == 0, res.output
    assert "AGREES" in res.output and "DISAGREES" not in res.output


def test_inspect_shows_the_shape_tensor_values_recorded(tmp_path):
    model = mask_model(tmp_path / "m.onnx")
    code, out = _build(model, "-o", tmp_path / "m.engine", "--shapes", "mask:[1,1,0,0,0,0]")
    assert code == 0, out
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "m.engine")])
    assert res.exit_code == 0, res.output
    assert "profile 0 mask (shape tensor) values: min [1, 1, 0, 0, 0, 0]" in res.output
    doc = json.loads(CliRunner().invoke(cli, ["inspect", str(tmp_path / "m.engine"), "--json"]).stdout)
    assert doc["shape_input_values"][0]["mask"]["max"] == [1, 1, 0, 0, 0, 0]
