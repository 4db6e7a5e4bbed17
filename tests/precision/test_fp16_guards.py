"""The vanishing-epsilon rule: an epsilon FP16 rounds to 0, guarding a function singular at zero.

Found on Spotify's basic-pitch (its PyPI wheel's nmp.onnx, whose package needs TensorFlow, so not in the test
extra): a constant-Q front-end, then ``Log(Square(|CQT|) + 1e-10)``; in FP16 the 1e-10 is 0, quiet bins square
to 0, the log is -inf and the normalisation after it NaN: 94 of 100 real speech windows NaN, exit 7 with no
node named. The front-end is rebuilt here, small, on real recorded speech.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from realdata import recorded_speech

from trtconv.precision.fp16 import Fp16Settings, convert_fp16
from trtconv.reference import ort

F = TensorProto.FLOAT
BINS, TAPS, HOP = 24, 256, 64


def _init(name: str, arr) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def _log_power_front_end(eps: float) -> onnx.ModelProto:
    """audio [1, 1, S] -> Conv with cosine and sine kernels -> |X| -> log(|X|² + eps), as basic-pitch computes it
    (the magnitude as the root of a sum of squares, then squared again before the log)."""
    t = np.arange(TAPS) / 16000.0
    freqs = 55.0 * 2 ** (np.arange(BINS) / 4)
    window = np.hanning(TAPS)
    kernels = np.concatenate([np.cos(2 * np.pi * freqs[:, None] * t) * window,
                              np.sin(2 * np.pi * freqs[:, None] * t) * window]) / TAPS
    nodes = [
        helper.make_node("Conv", ["audio", "w"], ["x"], strides=[HOP], name="cqt_conv"),
        helper.make_node("Reshape", ["x", "pairs"], ["xr"], name="cqt_pairs"),
        helper.make_node("Mul", ["xr", "xr"], ["sq"], name="cqt_square"),
        helper.make_node("ReduceSum", ["sq", "axis1"], ["power"], keepdims=0, name="cqt_sum"),
        helper.make_node("Sqrt", ["power"], ["mag"], name="cqt_magnitude"),
        helper.make_node("Transpose", ["mag"], ["mag_t"], perm=[0, 2, 1], name="frames_first"),
        helper.make_node("Mul", ["mag_t", "mag_t"], ["pow2"], name="log_square"),
        helper.make_node("Add", ["pow2", "eps"], ["guarded"], name="log_eps"),
        helper.make_node("Log", ["guarded"], ["logp"], name="log"),
        helper.make_node("ReduceMin", ["logp"], ["lo"], keepdims=1, name="lo"),
        helper.make_node("Sub", ["logp", "lo"], ["y"], name="from_floor"),
    ]
    g = helper.make_graph(nodes, "front_end", [helper.make_tensor_value_info("audio", F, [1, 1, 16000])],
                          [helper.make_tensor_value_info("y", F, [1, "frames", BINS])],
                          [_init("w", kernels[:, None, :]), _init("eps", [eps]),
                           numpy_helper.from_array(np.array([1, 2, BINS, -1], np.int64), "pairs"),
                           numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _speech(n: int) -> list[dict[str, np.ndarray]]:
    """Real recorded speech at quiet levels (its pauses are where the squares go below FP16's range)."""
    return [{"audio": (recorded_speech(seed)[:16000] * 0.05).astype(np.float32)[None, None]} for seed in range(n)]


def _kept(result) -> dict[str, str]:
    return {k.name: k.rule for k in result.report.kept}


def test_an_epsilon_fp16_erases_keeps_its_guard_the_log_and_the_squares_in_fp32():
    model, samples = _log_power_front_end(1e-10), _speech(6)
    res = convert_fp16(model, Fp16Settings(), samples)  # raised Fp16AccuracyError (NaN/Inf) before the rule
    assert _kept(res) == {n: "vanishing-epsilon" for n in (
        "cqt_square", "cqt_sum", "cqt_magnitude", "frames_first", "log_square", "log_eps", "log")}
    assert {n.name for n in res.model.graph.node if n.op_type == "Conv"} == {"cqt_conv"}  # what squares read: FP16
    (stats,) = res.report.accuracy
    assert stats.nonfinite == 0 and stats.cosine >= 0.999, stats
    detail = next(k.detail for k in res.report.kept if k.name == "log")
    assert detail == "Add 'log_eps' keeps Log 'log' from zero with 1e-10, which FP16 rounds to 0", detail
    # the converted model runs and stays finite where the input is silent
    silent = {"audio": np.zeros((1, 1, 16000), np.float32)}
    assert np.isfinite(ort.run_model(res.model, silent)["y"]).all()


def test_an_epsilon_fp16_holds_changes_nothing():
    """1e-5 is a normal FP16 number: the guard works in FP16 and every node converts."""
    res = convert_fp16(_log_power_front_end(1e-5), Fp16Settings(), _speech(3))
    assert "vanishing-epsilon" not in _kept(res).values()
    assert res.report.accuracy[0].nonfinite == 0


def test_a_layernorm_written_out_keeps_its_variance_and_division_in_fp32_for_a_1e_12_epsilon():
    """BERT's LayerNorm as torch.onnx writes it below opset 17: (x - mean) / sqrt(mean((x - mean)²) + 1e-12). The
    variance of a constant row is 0, and 0 + 0 in FP16 divides by zero; the centring (Sub) and the scale stay FP16.
    (A BERT from transformers' config, exported at opset 14: 25 nodes of its 5 LayerNorms, 11 Casts.)"""
    nodes = [  # the epsilon as torch.onnx writes it: a Constant node, not an initializer
        helper.make_node("Constant", [], ["eps"], value=numpy_helper.from_array(np.array(1e-12, np.float32))),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], name="mean"),
        helper.make_node("Sub", ["x", "mean"], ["d"], name="centre"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="square"),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], name="variance"),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="std"),
        helper.make_node("Div", ["d", "std"], ["n"], name="normalise"),
        helper.make_node("Mul", ["n", "gamma"], ["y"], name="scale"),
    ]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", F, [2, 8])],
                          [helper.make_tensor_value_info("y", F, [2, 8])],
                          [_init("two", 2.0), _init("gamma", np.linspace(0.5, 1.5, 8))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    x[1] = 0.25  # a constant row: variance 0
    res = convert_fp16(model, Fp16Settings(), [{"x": x}])
    assert _kept(res) == {n: "vanishing-epsilon" for n in ("square", "variance", "add_eps", "std", "normalise")}
    assert res.report.accuracy[0].nonfinite == 0
    np.testing.assert_allclose(ort.run_model(res.model, {"x": x})["y"][1], 0.0)


def test_whispers_log_mel_front_end_stays_finite_on_silence_in_fp16():
    """onnx-asr's Whisper front-end (a model the rule was not developed on): ``Log(Clip(mel, 1e-10))``. In FP16
    the clip's floor is 0, and a silent second (a pause, a VAD gap) came out inf; now as in FP32."""
    from realmodels import onnx_asr_model

    model = onnx.load(onnx_asr_model("whisper80.onnx"))
    names = [i.name for i in model.graph.input]
    silent = {names[0]: np.zeros((1, 16000), np.float32)}
    if len(names) > 1:
        silent[names[1]] = np.array([16000], np.int64)
    res = convert_fp16(model, Fp16Settings())
    assert sorted(k.op_type for k in res.report.kept if k.rule == "vanishing-epsilon") == ["Clip", "Log"]
    want, got = ort.run_model(model, silent), ort.run_model(res.model, silent)
    for name, ref in want.items():
        assert np.isfinite(ref).all()
        np.testing.assert_allclose(got[name].astype(np.float32), ref, atol=1e-3)
