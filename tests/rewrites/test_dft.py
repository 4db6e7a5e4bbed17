"""DFT without a DFT importer (trtconv/rewrites/spectral/dft.py): one MatMul by the transform's matrix, proven
against ONNX Runtime's DFT; applied only for the targets that lack DFT; the real TensorRT-RTX parser refuses the
original and builds the rewrite."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, rewrite

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None
RTX = RewriteSettings(target="rtx")


def dft_model(shape: list, *, opset: int = 17, axis: int | None = None, length: int | None = None,
              inverse: int = 0, onesided: int = 0) -> onnx.ModelProto:
    """x [shape] -> DFT -> y, dft_length and (opset 20) axis as initializers."""
    inits, ins = [], ["x", ""]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "n_fft"))
        ins[1] = "n_fft"
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        if axis is not None:
            inits.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
            ins.append("axis")
    elif axis is not None:
        attrs["axis"] = axis
    while ins and ins[-1] == "":
        ins.pop()
    node = helper.make_node("DFT", ins, ["y"], name="dft", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


CASES = {  # name: (shape, opset, axis, dft_length, inverse, onesided)
    "real-onesided-frames": ([2, 7, 400, 1], 17, -2, 512, 0, 1),  # a spectrogram's frames, zero-padded to 512
    "real-full-axis1": ([3, 16, 1], 17, 1, None, 0, 0),
    "complex-forward-cut": ([2, 24, 2], 17, 1, 20, 0, 0),  # cut to dft_length
    "complex-inverse": ([2, 5, 12, 2], 17, 2, None, 1, 0),
    "opset20-default-axis": ([4, 30, 1], 20, None, None, 0, 1),
    "opset20-axis-input": ([3, 9, 4, 2], 20, 1, 16, 0, 0),  # not the axis next to the last: moved and back
}


@pytest.mark.parametrize("case", list(CASES))
def test_dft_becomes_one_matmul_proven_against_onnx_runtime(case):
    shape, opset, axis, length, inverse, onesided = CASES[case]
    model = dft_model(shape, opset=opset, axis=axis, length=length, inverse=inverse, onesided=onesided)
    res = rewrite(model, RTX)
    (e,) = res.report.rewrites
    assert (e.rule, e.proof.method, e.proof.passed) == ("dft-matmul", "onnxruntime", True), e.proof
    ops = [n.op_type for n in res.model.graph.node]
    assert "DFT" not in ops and ops.count("MatMul") == 1
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref, got = run_model(model, {"x": x})["y"], run_model(res.model, {"x": x})["y"]
    assert ref.shape == got.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def test_only_the_targets_without_dft_rewrite_it():
    model = dft_model([2, 16, 1], axis=1, onesided=1)
    assert [e.rule for e in rewrite(model, RewriteSettings(target="10.16")).report.rewrites] == ["dft-matmul"]
    kept = rewrite(model, RewriteSettings(target="11.4"))  # TensorRT 11.2.1 imports DFT as a cuFFT plugin
    assert not kept.report.rewrites and [n.op_type for n in kept.model.graph.node] == ["DFT"]


@pytest.mark.parametrize("shape, attrs, why", [
    ([2, "N", 1], {"axis": 1}, "signal axis' length is not static"),
    ([2, 8, 2], {"axis": 1, "onesided": 1}, "one-sided output of an inverse or complex DFT"),
    ([2, 8, 3], {"axis": 1}, "last dimension is not a known 1 (real) or 2 (complex)"),
])
def test_forms_it_cannot_take_are_left_and_said(shape, attrs, why):
    node = helper.make_node("DFT", ["x"], ["y"], name="dft", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    res = rewrite(model, RTX)
    assert not res.report.rewrites and [n.op_type for n in res.model.graph.node] == ["DFT"]
    assert any("dft-matmul cannot rewrite it" in note and why in note for note in res.report.notes), res.report.notes


@pytest.mark.skipif(not HAVE_RTX, reason="needs tensorrt-rtx (the rtx extra)")
def test_rtx_refuses_dft_and_builds_the_rewrite(tmp_path: Path):
    """A log-power spectrogram of 400-sample frames (a speech front-end's), as the real parser sees it."""
    frames = helper.make_node("DFT", ["x", "n_fft"], ["spec"], name="dft", axis=-2, onesided=1)
    power = helper.make_node("ReduceSumSquare", ["spec", "last"], ["power"], name="power", keepdims=0)
    g = helper.make_graph([frames, power], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 98, 400, 1])],
                          [helper.make_tensor_value_info("power", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array(512, np.int64), "n_fft"),
                                       numpy_helper.from_array(np.array([-1], np.int64), "last")])
    path = tmp_path / "spec.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    runner = CliRunner()
    checked = runner.invoke(cli, ["check", str(path), "--trt", "rtx", "--json"])
    assert checked.exit_code == ExitCode.NEEDS_REWRITE, checked.output
    built = runner.invoke(cli, ["build", str(path), "--trt", "rtx", "-o", str(tmp_path / "spec.engine")])
    assert built.exit_code == ExitCode.OK, built.output
    assert (tmp_path / "spec.engine").stat().st_size > 1000
    assert "1 of 1 rewrite(s)" in built.stdout


@pytest.mark.parametrize("shape, length", [([2, 24, 2], 20), ([4, 30, 1], 30), ([2, 7, 400, 1], 512)])
def test_the_product_is_within_float32_rounding_of_the_definition(shape, length):
    """Against numpy's float64 FFT (the op's definition), the rewritten form is within a few float32 units of the
    largest value, at lengths that are not a power of two too (where ONNX Runtime's own DFT is some 20 times
    further off: why the whole-graph proof allows reordered sums' rounding)."""
    model = dft_model(shape, axis=1, length=length)
    x = np.random.default_rng(2).standard_normal(shape)
    z = x[..., 0] + (1j * x[..., 1] if shape[-1] == 2 else 0)
    exact = np.fft.fft(z.astype(np.complex128), n=length, axis=1)
    exact = np.stack([exact.real, exact.imag], -1)
    got = run_model(rewrite(model, RTX).model, {"x": x.astype(np.float32)})["y"].astype(np.float64)
    assert np.abs(got - exact).max() <= 3e-7 * np.abs(exact).max()


def test_checks_hint_names_the_command_that_applies_the_rule(tmp_path: Path):
    """A rule for some targets only is applied by ``rewrite --trt TARGET`` (and ``build --trt TARGET``), not by
    ``rewrite`` without a target: check's hint once said "`trtconv rewrite` rewrites it", and that command left
    the DFT as it was. The hint's command, run as printed (with its model and output), rewrites it."""
    path = tmp_path / "dft.onnx"
    onnx.save(dft_model([2, 16, 1], axis=1, onesided=1), path)
    res = CliRunner().invoke(cli, ["check", str(path), "--trt", "rtx", "--json"])
    assert res.exit_code == ExitCode.NEEDS_REWRITE, res.output
    (node,) = json.loads(res.stdout)["nodes"]
    hint = node["findings"][0]["hint"]
    assert hint.startswith("`trtconv rewrite --trt rtx` rewrites it, as `trtconv build --trt rtx` does (dft-matmul:")
    command = hint.split("`")[1].split()
    done = CliRunner().invoke(cli, [*command[1:], str(path), "-o", str(tmp_path / "rtx.onnx")])
    assert done.exit_code == 0, done.output
    assert "DFT" not in [n.op_type for n in onnx.load(str(tmp_path / "rtx.onnx")).graph.node]
    kept = CliRunner().invoke(cli, ["rewrite", str(path), "-o", str(tmp_path / "r.onnx")])
    assert kept.exit_code == 0 and [n.op_type for n in onnx.load(str(tmp_path / "r.onnx")).graph.node] == ["DFT"]


def test_real_speech_front_end_rewritten_for_rtx_and_proven_on_lengths_it_can_use(tmp_path: Path):
    """onnx-asr's WeSpeaker filterbank (a real model no other test uses): `rewrite --trt rtx --shapes` turns its DFT
    into a MatMul and proves the whole graph. Two things stood in the way: its `Shape(waveforms, start=1)` folded
    as the whole shape (onnx-graphsurgeon ignores start/end), and the proof's random `waveforms_lens` (0..3, as any
    integer input got) left no frame to compute, so the graph proof compared all-zero features and said
    "max|err| 0". Lengths now run from half to all of the waveform, and the proof sees the DFT's rounding."""
    from realmodels import onnx_asr_model

    from trtconv.onnxutil import length_inputs
    from trtconv.reference.ort import random_feeds

    model = onnx_asr_model("wespeaker.onnx")
    assert length_inputs(onnx.load(str(model))) == {"waveforms_lens": "waveforms"}
    out = tmp_path / "wespeaker.rtx.onnx"
    res = CliRunner().invoke(cli, ["rewrite", str(model), "--trt", "rtx", "--shapes",
                                   "waveforms:1x16000,waveforms_lens:1", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["rule"] for r in doc["rewrites"]] == ["dft-matmul"], doc["rewrites"]
    proof = doc["graph_proof"]
    assert proof["method"] == "onnxruntime" and proof["passed"]
    assert 0 < max(s["max_abs"] for s in proof["outputs"]) <= proof["tolerance"]  # exactly 0 was all-zero features
    feeds = random_feeds(onnx.load(str(model)), {"waveforms": (1, 16000), "waveforms_lens": (1,)})
    assert 8000 <= int(feeds["waveforms_lens"][0]) <= 16000
    original, rewritten = run_model(model, feeds)["features"], run_model(out, feeds)["features"]
    assert np.abs(original).max() > 1 and np.abs(original - rewritten).max() <= 1e-5 * np.abs(original).max()
