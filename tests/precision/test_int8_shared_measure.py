"""Choosing's measurements made cheaper without changing a number (issue 32, Deliver 4: ddddocr's CRNN).

The candidates of method ``auto`` are measured in one pair of sessions with their activations' scales as inputs
(``scale_fed``), and every candidate model runs with its weights' DequantizeLinear computed once
(``measured.weights_dequantized``). Both must give what a model built and run as written gives, bit for bit:
the choice, its scores and the written model rest on those numbers.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from builders import two_conv_net
from onnx import helper, numpy_helper

from trtconv.onnxutil import dequantized
from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, quantize_int8
from trtconv.precision.int8.candidate import CandidateBuilder, finalize_placements
from trtconv.precision.int8.measured import measured_form, weights_dequantized
from trtconv.precision.int8.prepare import PreparedModels
from trtconv.precision.int8.qdq import plan_qdq
from trtconv.reference import Thresholds, run, session
from trtconv.samples.sources import ArraySamples


def _samples(seed: int, n: int) -> ArraySamples:
    rng = np.random.default_rng(seed)
    return ArraySamples(tuple({"x": rng.standard_normal((1, 4, 12, 12)).astype(np.float32)} for _ in range(n)))


def _builder_and_plan(remainder: str = "fp16"):
    settings = Int8Settings(method="auto", unverified=True, remainder=remainder)
    work, _ = PreparedModels.of(two_conv_net(), None, settings).get()
    plan = plan_qdq(work, exclude=settings.exclude, residual_add=settings.residual_add)
    return work, settings, plan


def _scales(plan, value: float) -> dict[str, float]:
    return {t: value * (1 + k / 7) for k, t in enumerate(plan.activation_tensors())}


def test_weights_dequantized_once_give_the_outputs_bit_for_bit():
    work, settings, plan = _builder_and_plan()
    scales = _scales(plan, 0.05)
    placed, _ = finalize_placements(plan.placements, scales, set())
    cand = CandidateBuilder(work, None, scales, settings, {}, check_loads=False).build(placed)
    for model in (cand.runnable, *cand.twins):  # FP16 scales in the first, FP32 in the twin
        folded = weights_dequantized(model)
        inits = {t.name for t in folded.graph.initializer}
        dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
        left = [n for n in folded.graph.node if n.op_type == "DequantizeLinear"]
        assert len(dqs) - len(left) == 2 and not any(n.input[0] in inits for n in left)  # the two weights'
        a, b = session(model), session(folded)
        for sample in _samples(5, 3):
            np.testing.assert_array_equal(run(a, sample)["y"], run(b, sample)["y"], strict=True)


def test_the_twins_casts_of_constants_are_computed_once_and_fed_bit_for_bit():
    """The exact-rounding twin rounds each weight to FP16 and back on every run; the measured form computes those
    Casts once and feeds them (an input: not prepacked, as the Cast's output is not): the same outputs, bit for bit,
    as the twin as written."""
    work, settings, plan = _builder_and_plan()
    scales = _scales(plan, 0.05)
    placed, _ = finalize_placements(plan.placements, scales, set())
    cand = CandidateBuilder(work, None, scales, settings, {}, check_loads=False).build(placed)
    twin = cand.twins[0]
    form, feeds = measured_form(twin)
    folded = weights_dequantized(twin)  # each weight's DequantizeLinear a constant: its rounding pair reads it
    inits = {t.name for t in folded.graph.initializer}
    assert len([n for n in folded.graph.node if n.op_type == "Cast" and n.input[0] in inits]) == len(feeds) == 2
    assert not any(n.op_type == "Cast" and n.input[0] in {t.name for t in form.graph.initializer}
                   for n in form.graph.node)
    assert set(feeds) <= {i.name for i in form.graph.input}
    a, b = session(twin), session(form)
    for sample in _samples(6, 3):
        np.testing.assert_array_equal(run(a, sample)["y"], run(b, {**sample, **feeds})["y"], strict=True)
    assert measured_form(cand.runnable)[1] == {}  # ONNX Runtime's run of the FP16 model has no such Cast


def test_numpy_rounds_to_float16_as_onnx_runtimes_cast():
    """The measured form's Casts are numpy's: round to nearest even, subnormals, ties, overflow and infinities
    as ONNX Runtime's Cast gives them."""
    rng = np.random.default_rng(3)
    edge = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9, np.inf, -np.inf, 6.1e-5, 5.96e-8, 2.98e-8,
                     2.99e-8, 1e-10, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2049.0, 2051.0], np.float32)
    x = np.concatenate([edge, (rng.standard_normal(100_000) * 10.0 ** rng.integers(-9, 6, 100_000)).astype(np.float32),
                        rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    x = x[np.isfinite(x) | np.isinf(x)]  # NaN payloads aside
    node = helper.make_node("Cast", ["x"], ["h"], to=onnx.TensorProto.FLOAT16)
    back = helper.make_node("Cast", ["h"], ["y"], to=onnx.TensorProto.FLOAT)
    graph = helper.make_graph([node, back], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT16, [None]),
                               helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None])])
    got = run(session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])), {"x": x})
    with np.errstate(over="ignore"):  # beyond 65504 is infinity, as it should be
        half = x.astype(np.float16)
    np.testing.assert_array_equal(got["h"].view(np.uint16), half.view(np.uint16), strict=True)
    np.testing.assert_array_equal(got["y"].view(np.uint32), half.astype(np.float32).view(np.uint32), strict=True)


def test_candidates_fed_their_scales_measure_what_a_built_candidate_measures():
    from trtconv.precision.int8.scale_fed import scale_fed

    work, settings, plan = _builder_and_plan()
    first = _scales(plan, 0.05)
    fed = scale_fed(CandidateBuilder(work, None, first, settings, {}, check_loads=False),
                    finalize_placements(plan.placements, first, set())[0])
    assert fed is not None
    samples = _samples(4, 5)
    for scales in (first, _scales(plan, 0.11), _scales(plan, 0.02)):
        placed, _ = finalize_placements(plan.placements, scales, set())
        assert fed.fits(placed)
        built = CandidateBuilder(work, None, scales, settings, {}, check_loads=False).build(placed)
        want = built.accuracy(two_conv_net(), samples, None, None)
        got = fed.accuracy(scales, two_conv_net(), samples, None)
        assert got.stats == want.stats and got.cosines == want.cosines and got.worst == want.worst


def test_without_the_fp16_remainder_each_candidate_is_built():
    from trtconv.precision.int8.scale_fed import scale_fed

    work, settings, plan = _builder_and_plan("fp32")  # ONNX Runtime fuses Q/DQ with constant scales there
    scales = _scales(plan, 0.05)
    assert scale_fed(CandidateBuilder(work, None, scales, settings, {}, check_loads=False),
                     finalize_placements(plan.placements, scales, set())[0]) is None


def _auto(shared: bool, early_stop: bool):
    settings = Int8Settings(method="auto", unverified=True, early_stop=early_stop, shared_sessions=shared,
                            thresholds=Thresholds(min_cosine=0.9999))  # no candidate with margin: all measured
    try:
        return quantize_int8(two_conv_net(), settings, _samples(1, 8), select_samples=_samples(2, 6),
                             eval_samples=_samples(3, 6))
    except Int8AccuracyError as exc:
        return exc.result


def test_auto_chooses_and_writes_the_same_with_shared_sessions():
    for early_stop in (False, True):
        built, shared = _auto(False, early_stop), _auto(True, early_stop)
        assert [o.to_json() for o in shared.report.calibration_choice] == [
            o.to_json() for o in built.report.calibration_choice]
        assert shared.report.chosen_method == built.report.chosen_method
        assert shared.model.SerializeToString() == built.model.SerializeToString()
        assert shared.report.accuracy == built.report.accuracy


def _choice(early_stop: bool, limit: float):
    settings = Int8Settings(method="auto", unverified=True, early_stop=early_stop, thresholds=Thresholds(min_cosine=limit))
    try:
        result = quantize_int8(two_conv_net(), settings, _samples(1, 8), select_samples=_samples(2, 6),
                               eval_samples=_samples(3, 6))
    except Int8AccuracyError as exc:
        result = exc.result
    return result.report


def test_mse_measured_ahead_stops_the_others_sooner_and_changes_no_choice():
    from trtconv.precision.int8.choice import with_margin

    for limit in (0.99, 0.998, 0.9985, 0.9988, 0.9995, 0.9999):
        full = _choice(False, limit).calibration_choice  # every candidate measured in full, in the order given
        # what the search in the order given chooses: the best so far (ties: the earlier), ending at the first
        # candidate with margin
        seen = []
        for o in full:
            seen.append(o)
            if with_margin(o, Thresholds(min_cosine=limit)):
                break
        want = max(range(len(seen)), key=lambda i: (seen[i].passes, seen[i].worst_cosine, -i))
        early = _choice(True, limit)
        assert early.chosen_method == seen[want].label, limit
        assert [o.label for o in early.calibration_choice] == [o.label for o in seen], limit
    # at 0.9988 every candidate passes, none with margin: percentile-99.99 beats every candidate before it (measured
    # in full in the order given) but not mse, measured ahead of it
    options = {o.label: o for o in _choice(True, 0.9988).calibration_choice}
    assert options["percentile-99.99"].stopped and not options["mse"].stopped


@pytest.mark.parametrize("qtype", [np.int8, np.uint8])
@pytest.mark.parametrize("zeros", ["none", "zeros", "random"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("stype", [np.float32, np.float16])
def test_dequantized_is_onnx_runtimes_dequantize_linear(qtype, zeros, per_channel, stype):
    """The weights' fold computes ``(q - zero) * scale`` in narrow integers (int16 for 8-bit q, no subtraction for a
    zero point of zeros): the same values as ONNX Runtime's DequantizeLinear, bit for bit, whatever the zero point."""
    rng = np.random.default_rng(7)
    info = np.iinfo(qtype)
    q = rng.integers(info.min, info.max, (6, 5, 3), endpoint=True).astype(qtype)
    n = q.shape[1] if per_channel else 1
    scale = (rng.random(n) * 0.02 + 1e-3).astype(stype).reshape((n,) if per_channel else ())
    zero = None if zeros == "none" else np.zeros(scale.shape, qtype) if zeros == "zeros" else \
        rng.integers(info.min, info.max, scale.shape, endpoint=True).astype(qtype)
    inits = [numpy_helper.from_array(scale, "s")] + ([numpy_helper.from_array(zero, "z")] if zero is not None else [])
    node = helper.make_node("DequantizeLinear", ["q", "s"] + (["z"] if zero is not None else []), ["y"], axis=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("q", helper.np_dtype_to_tensor_dtype(
        np.dtype(qtype)), list(q.shape))], [helper.make_tensor_value_info(
            "y", helper.np_dtype_to_tensor_dtype(np.dtype(stype)), list(q.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    want = run(session(model), {"q": q})["y"]
    got = dequantized(q, scale, zero, 1).astype(stype)
    np.testing.assert_array_equal(got, want, strict=True)
