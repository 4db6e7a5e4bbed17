"""Hints that fit the model (issue 35): a model with dynamic height and width gets a min/opt/max range
said plainly to be placeholders, never one size presented as right (an OCR detector fixed at
224x224 refuses every real page); the hint runs as printed. Images for a channels-last input get
``layout=nhwc``, and are never silently read channels-first."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def _run(args: list[str]):
    return CliRunner().invoke(cli, args)


def _detector(path: Path) -> Path:
    """x [1, 3, H, W] -> 3x3 Conv to 4 channels -> Relu: any H and W, like a text detector."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "det",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "height", "width"])],
                          initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_dynamic_height_and_width_get_a_range_called_placeholders_that_runs_as_printed(tmp_path):
    pytest.importorskip("tensorrt_rtx")
    model, engine = _detector(tmp_path / "det.onnx"), tmp_path / "det.engine"
    res = _run(["build", str(model), "-o", str(engine), "--trt", "rtx", "--report", str(tmp_path / "r.html")])
    assert res.exit_code == ExitCode.USAGE, res.output
    (hint,) = [line.strip() for line in res.stderr.splitlines() if line.strip().startswith("hint:")]
    assert "--shapes" not in hint and "x:1x3x224x224 (" not in hint, hint  # no single size, as if it were right
    assert "  # placeholders: the model does not say its sizes (x dims 2, 3)" in hint, hint
    argv = shlex.split(hint.removeprefix("hint: "), comments=True)[1:]  # the whole line, as a shell reads it
    assert argv[argv.index("--report") + 1] == str(tmp_path / "r.html")  # the whole command, its paths too
    lo, opt, hi = (argv[argv.index(f) + 1] for f in ("--min-shapes", "--opt-shapes", "--max-shapes"))
    assert lo == "x:1x3x32x32" and opt == "x:1x3x224x224" and hi == "x:1x3x640x640"

    again = _run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    profile = json.loads((tmp_path / "det.engine.json").read_text())["profiles"][0]["x"]
    assert (profile["min"], profile["max"]) == ([1, 3, 32, 32], [1, 3, 640, 640])


def _channels_last(path: Path, dims: list[int | str]) -> Path:
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
                           helper.make_node("Relu", ["t"], ["y"], name="relu")], "nhwc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("dims", [[1, 32, 32, 3], ["n", "h", "w", 3], [1, 32, 32, 1]], ids=["static", "dynamic", "gray"])
def test_images_for_a_channels_last_input_get_layout_nhwc(tmp_path, dims):
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        pixels = (np.random.default_rng(i).random((40, 50, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(images / f"{i}.png")
    model = _channels_last(tmp_path / "m.onnx", dims)
    out = tmp_path / "m.fp16.onnx"
    res = _run(["quantize", str(model), "--precision", "fp16", "--calib-data", str(images), "-o", str(out)])
    assert res.exit_code == ExitCode.BAD_DATA, res.output  # never read as NCHW (a 3-pixel-wide image) in silence
    (hint,) = [line.strip() for line in res.stderr.splitlines() if line.strip().startswith("hint:")]
    shown = "[" + ", ".join(map(str, dims)) + "]"
    add = "layout=nhwc" + (",order=gray" if dims[3] == 1 else "")
    assert hint == f"hint: add {add} to --preprocess: the model's input is {shown}, {dims[3]} channel(s) last", hint
    assert not out.exists()

    res = _run(["quantize", str(model), "--precision", "fp16", "--calib-data", str(images), "-o", str(out),
                "--preprocess", add])
    assert res.exit_code == ExitCode.OK, res.output


def test_random_data_takes_the_profiles_opt_shapes_and_warns_once_in_fp16_words(tmp_path):
    """--min/--opt/--max-shapes are shapes given: random data runs at the opt corner, never asking for --shapes."""
    pytest.importorskip("tensorrt_rtx")
    model = _detector(tmp_path / "det.onnx")
    res = _run(["build", str(model), "-o", str(tmp_path / "det.engine"), "--trt", "rtx", "--precision", "fp16",
                "--random-data", "2", "--min-shapes", "x:1x3x32x32", "--opt-shapes", "x:1x3x64x64",
                "--max-shapes", "x:1x3x128x128"])
    assert res.exit_code == ExitCode.OK, res.output
    warned = [line for line in res.stderr.splitlines() if "RANDOM" in line]
    assert warned == ["trtconv: warning: using 2 RANDOM sample(s): activation ranges and errors will not reflect "
                      "real inputs; use this only to smoke-test"], warned


def test_too_few_dims_in_shapes_get_the_models_own_dims_back_runnable_as_printed(tmp_path):
    """``--shapes x:1x3x64`` for [1, 3, height, width]: the hint is 1x3x64x64 (the dims said, the last size
    repeated), never 1x3x1x1; build's hint is the whole command and runs as printed."""
    pytest.importorskip("tensorrt_rtx")
    model, engine = _detector(tmp_path / "det.onnx"), tmp_path / "det.engine"
    res = _run(["build", str(model), "-o", str(engine), "--trt", "rtx", "--shapes", "x:1x3x64"])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "has rank 4 [1, 3, height, width], the shape given has 3 dims" in res.stderr
    (hint,) = [line.strip() for line in res.stderr.splitlines() if line.strip().startswith("hint:")]
    argv = shlex.split(hint.removeprefix("hint: "), comments=True)
    assert argv[:2] == ["trtconv", "build"] and argv[argv.index("--shapes") + 1] == "x:1x3x64x64", hint
    assert not engine.exists()
    again = _run(argv[1:])
    assert again.exit_code == ExitCode.OK, again.output

    res = _run(["build", str(model), "-o", str(tmp_path / "zero.engine"), "--trt", "rtx", "--shapes", "x:1x3x0x64"])
    assert res.exit_code == ExitCode.USAGE and "has a zero dim" in res.stderr, res.output
    assert res.stderr.strip().splitlines()[-1].strip().endswith("--shapes x:1x3x1x64"), res.stderr  # a hint, runnable
    # check, and quantize's random data (a --shapes mistake there is exit 2, not "bad data"): the same example
    for args in (["check", str(model)],
                 ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--precision", "fp16", "--random-data", "1"]):
        res = _run([*args, "--shapes", "x:1x3x64"])
        assert res.exit_code == ExitCode.USAGE, res.output
        assert "e.g. --shapes x:1x3x64x64" in res.stderr, res.stderr
    assert not (tmp_path / "q.onnx").exists()
    res = _run(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--precision", "fp16", "--random-data", "1",
                "--shapes", "x:1x3x64x64,nosuch:1x2"])  # a name that is no input is said, never ignored
    assert res.exit_code == ExitCode.USAGE and "'nosuch', which is not an input" in res.stderr, res.output


def test_images_without_preprocess_say_what_they_become_and_a_size_the_model_overrides(tmp_path):
    """Images are tensors only through a preprocessing: the default one (RGB, x 1/255, no mean/std) is said,
    once, as is a --preprocess size the model's fixed H/W overrides; a preprocessing given in full is quiet."""
    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray((np.random.default_rng(i).random((40, 50, 3)) * 255).astype(np.uint8)).save(images / f"{i}.png")
    model = tmp_path / "m.onnx"
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    cases = {(): "images read with the default preprocessing (RGB, pixels x 1/255, no mean/std, NCHW, resized to "
                 "the model's 32x32)",
             ("--preprocess", "size=100x100"): "--preprocess resizes to 100x100 (height x width), but the model "
                                                "fixes its input's to 32x32; images are resized to the model's",
             ("--preprocess", "size=32x32,mean=0.5/0.5/0.5"): None}
    for extra, said in cases.items():
        out = tmp_path / "m.fp16.onnx"
        res = _run(["quantize", str(model), "--precision", "fp16", "--calib-data", str(images), "-o", str(out),
                    "--force", *extra])
        assert res.exit_code == ExitCode.OK, res.output
        warnings = [line for line in res.stderr.splitlines() if line.startswith("trtconv: warning:")]
        assert warnings == ([] if said is None else [warnings[0]]) and (said is None or said in warnings[0]), warnings


def test_an_input_left_out_of_shapes_gets_the_sizes_its_named_dims_have_in_the_others(tmp_path):
    """a and b share [batch, 3, len]: --shapes a:2x3x50 alone names batch 2 and len 50, so b's hint is 2x3x50
    (was 1x3x1): the whole command, runnable as printed; with a range, each corner's."""
    pytest.importorskip("tensorrt_rtx")
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3, "len"]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "len"])])
    model = tmp_path / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    res = _run(["build", str(model), "-o", str(tmp_path / "two.engine"), "--trt", "rtx", "--shapes", "a:2x3x50"])
    assert res.exit_code == ExitCode.USAGE and "no shape for dynamic input(s) b" in res.stderr, res.output
    (hint,) = [line.strip().removeprefix("hint: ") for line in res.stderr.splitlines() if line.strip().startswith("hint:")]
    argv = shlex.split(hint)
    assert argv[argv.index("--shapes") + 1] == "a:2x3x50,b:2x3x50", hint
    assert _run(argv[1:]).exit_code == ExitCode.OK
    ranged = _run(["build", str(model), "-o", str(tmp_path / "r.engine"), "--trt", "rtx", "--min-shapes", "a:1x3x5",
                   "--opt-shapes", "a:2x3x50", "--max-shapes", "a:4x3x100"])
    assert ranged.exit_code == ExitCode.USAGE
    assert ("add --min-shapes b:1x3x5; --opt-shapes b:2x3x50; --max-shapes b:4x3x100") in ranged.stderr, ranged.stderr
