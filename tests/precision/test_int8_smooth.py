"""``method="auto"``'s SmoothQuant-style migration (issue 27, Deliver 1) on a pre-LN transformer block.

The block is built here with real outlier channels (a few LayerNorm gamma entries x20, what trained
transformers carry): one per-tensor INT8 scale spends its levels on them. Smoothing divides the
LayerNorms' gamma and beta by s and multiplies the reading weights' rows by it: exact in float
(shown on ONNX Runtime), kept because the held-out accuracy improves, replayed on a cache hit.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.candidate import smoothed
from trtconv.precision.int8.smooth import ALPHAS, channel_maxima, smoothable, smoothing_factors
from trtconv.samples.sources import SampleSet, SampleSource, model_inputs

C, H, T = 32, 64, 16


def pre_ln_block(outlier: float = 20.0, seed: int = 0) -> onnx.ModelProto:
    """LN -> MLP (MatMul, Add, Relu, MatMul, Add) -> residual -> LN -> head MatMul; gammas with outlier channels."""
    rng = np.random.default_rng(seed)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    g1 = 1 + 0.1 * rng.standard_normal(C)
    g1[[3, 11, 20]] *= outlier
    g2 = 1 + 0.1 * rng.standard_normal(C)
    g2[[5, 17]] *= outlier
    inits = [init("g1", g1), init("b1", 0.1 * rng.standard_normal(C)),
             init("W1", rng.standard_normal((C, H)) / np.sqrt(C)), init("c1", 0.1 * rng.standard_normal(H)),
             init("W2", rng.standard_normal((H, C)) / np.sqrt(H)), init("c2", 0.1 * rng.standard_normal(C)),
             init("g2", g2), init("b2", 0.1 * rng.standard_normal(C)),
             init("W3", rng.standard_normal((C, C)) / np.sqrt(C))]
    node = helper.make_node
    nodes = [node("LayerNormalization", ["x", "g1", "b1"], ["ln1"], name="ln1"),
             node("MatMul", ["ln1", "W1"], ["m1"], name="fc1"), node("Add", ["m1", "c1"], ["a1"], name="add1"),
             node("Relu", ["a1"], ["r1"], name="relu"), node("MatMul", ["r1", "W2"], ["m2"], name="fc2"),
             node("Add", ["m2", "c2"], ["a2"], name="add2"), node("Add", ["x", "a2"], ["y"], name="residual"),
             node("LayerNormalization", ["y", "g2", "b2"], ["ln2"], name="ln2"),
             node("MatMul", ["ln2", "W3"], ["out"], name="head")]
    g = helper.make_graph(nodes, "pre_ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, C])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, T, C])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def samples(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, T, C)).astype(np.float32)} for _ in range(n)]


def _run(model: onnx.ModelProto, feeds) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, f)[0] for f in feeds])


def sample_set(folder, data):
    """``data`` as a folder of .npy samples (a file source: the calibration cache can key it)."""
    folder.mkdir()
    for i, s in enumerate(data):
        np.save(folder / f"{i:03d}.npy", s["x"])
    return SampleSet(SampleSource.detect(folder), model_inputs(pre_ln_block()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("smooth")
    model, calib, held = pre_ln_block(), sample_set(root / "calib", samples(16, 1)), sample_set(root / "held", samples(8, 2))
    cache = root / "block.cache"
    without = quantize_int8(model, Int8Settings(method="auto", auto_smoothing=False), calib, eval_samples=held)
    with_ = quantize_int8(model, Int8Settings(method="auto", cache_path=cache), calib, eval_samples=held)
    return model, calib, held, cache, without, with_


def test_only_layernorms_read_by_matmuls_alone_are_smoothable():
    model = pre_ln_block()
    assert [s.key for s in smoothable(model)] == [("main", "ln1"), ("main", "ln2")]
    model.graph.node.insert(0, helper.make_node("Identity", ["b1"], ["b1_shared"], name="share"))
    model.graph.node[1].input[2] = "b1_shared"  # torch's exporter shares equal biases through Identity
    assert [s.key for s in smoothable(model)] == [("main", "ln1"), ("main", "ln2")]
    data = samples(2, 4)
    factors = smoothing_factors(model, channel_maxima(model, data), 0.5)
    assert np.allclose(_run(smoothed(model, factors), data), _run(model, data), atol=1e-5)
    model.graph.node.append(helper.make_node("Relu", ["ln2"], ["side"], name="side"))  # ln2 also feeds a Relu
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    assert [s.key for s in smoothable(model)] == [("main", "ln1")]


def test_smoothing_is_exact_in_float():
    model, data = pre_ln_block(), samples(6, 3)
    xmax = channel_maxima(model, data)
    assert set(xmax) == {"ln1", "ln2"} and xmax["ln1"].argsort()[-3:].tolist() == sorted([3, 11, 20], key=lambda j:
                                                                                         xmax["ln1"][j])
    ref = _run(model, data)
    for alpha in ALPHAS:
        factors = smoothing_factors(model, xmax, alpha)
        assert set(factors) == {("main", "ln1"), ("main", "ln2")} and not np.allclose(factors[("main", "ln1")], 1)
        got = _run(smoothed(model, factors), data)
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()  # float rounding only
        # and it flattens the smoothed activation: its largest channel is far nearer the typical one
        after = channel_maxima(smoothed(model, factors), data)["ln1"]
        assert after.max() / np.median(after) < 0.5 * xmax["ln1"].max() / np.median(xmax["ln1"])


def test_smoothing_is_kept_where_it_makes_int8_more_accurate(runs):
    _, _, _, _, without, with_ = runs
    assert without.report.smoothing is None
    sm = with_.report.smoothing
    assert sm is not None and sm.kept and sm.alpha in ALPHAS and len(sm.factors) == 2
    assert sm.worst_cosine_with > sm.worst_cosine_without
    plain, smooth = (min(s.cosine for s in r.report.accuracy) for r in (without, with_))
    assert 1 - smooth < 0.7 * (1 - plain)  # the INT8 error down by more than 30 %
    # the smoothed tensors' scales were measured again, and are what the deployed model uses
    assert set(sm.scales) == {"ln1", "ln2"}
    assert all(with_.report.scales[t] == s and s < without.report.scales[t] for t, s in sm.scales.items())
    j = with_.report.to_json()["smoothing"]
    assert j["kept"] and j["layers"] == 2 and j["worst_cosine_with"] > j["worst_cosine_without"]


def test_a_cache_hit_replays_the_kept_smoothing(runs):
    model, calib, held, cache, _, with_ = runs
    side = json.loads(cache.with_name(cache.name + ".key.json").read_text())
    assert side["smoothing"]["alpha"] == with_.report.smoothing.alpha
    again = quantize_int8(model, Int8Settings(method="auto", cache_path=cache), calib, eval_samples=held)
    assert again.report.cache.hit and again.report.smoothing is not None and again.report.smoothing.kept
    assert again.model.SerializeToString() == with_.model.SerializeToString()


def test_the_switch_reaches_the_int8_stage():
    from trtconv.pipeline.build_settings import quantize_settings
    from trtconv.pipeline.quantize import int8_settings

    assert int8_settings(quantize_settings("int8", {"calib_method": "auto"})).auto_smoothing
    assert not int8_settings(quantize_settings("int8", {"calib_method": "auto", "no_smoothing": True})).auto_smoothing


def test_the_cli_reports_smoothing_and_turns_it_off(tmp_path):
    from click.testing import CliRunner

    from trtconv.cli.main import cli

    onnx.save(pre_ln_block(), str(tmp_path / "block.onnx"))
    (tmp_path / "data").mkdir()
    for i, s in enumerate(samples(24, 1)):
        np.save(tmp_path / "data" / f"{i:03d}.npy", s["x"])
    args = ["quantize", str(tmp_path / "block.onnx"), "--precision", "int8", "--calib-data", str(tmp_path / "data"),
            "--calib-method", "auto", "--no-calib-cache", "--force", "-o"]
    text = CliRunner().invoke(cli, [*args, str(tmp_path / "a.onnx")])
    assert text.exit_code == 0, text.output
    assert "smoothing (alpha 0." in text.output and "2 LayerNorms): kept" in text.output
    off = CliRunner().invoke(cli, [*args, str(tmp_path / "b.onnx"), "--no-smoothing", "--json"])
    assert off.exit_code == 0, off.output
    assert json.loads(off.stdout)["int8"]["smoothing"] is None


def test_no_smoothing_keeps_its_own_cache(runs):
    """A kept bias correction was measured on the smoothed model: a run without smoothing must not replay it."""
    model, calib, held, cache, _, with_ = runs
    off = quantize_int8(model, Int8Settings(method="auto", cache_path=cache, auto_smoothing=False), calib,
                        eval_samples=held)
    assert not off.report.cache.hit and off.report.smoothing is None
    assert off.report.cache.key != with_.report.cache.key
