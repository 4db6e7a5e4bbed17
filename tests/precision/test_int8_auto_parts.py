"""``method="auto"``'s per-tensor calibration and bias correction (issue 27, Deliver 1), on PP-OCRv4 cls
with real rendered text lines.

Per-tensor: each activation tensor takes the candidate under which the layers reading it add the
least error of their own, the mix is judged on the held-out samples with the whole-model candidates,
the report says which tensor took which method, and the cache's sidecar keeps it. Bias correction:
the measured mean shift of each layer's output channels is gone once folded into its bias.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from realdata import ocr_line_images

from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.bias import apply_bias_shifts, bias_shifts, mean_shifts
from trtconv.precision.int8.calibration import calibration_session, collect_scales
from trtconv.precision.int8.calibrators import AUTO_CANDIDATES, CalibSettings
from trtconv.precision.int8.choice import best_option
from trtconv.precision.int8.per_tensor import PER_TENSOR, per_tensor_choice
from trtconv.precision.int8.prepare import _prepare
from trtconv.precision.int8.qdq import plan_qdq
from trtconv.precision.int8.sensitivity import layer_errors, node_label, probe_model
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs


@pytest.fixture(scope="module")
def cls_sets(ocr_cls, tmp_path_factory):
    folder = tmp_path_factory.mktemp("parts")
    ocr_line_images(folder, range(10), flip_every=2)
    model = onnx.load(str(ocr_cls))
    src = SampleSource.detect(folder, ImagePreprocess.preset("ppocr-cls"))
    calib, held = SampleSet(src, model_inputs(model)).split(3)
    return model, calib, held


@pytest.fixture(scope="module")
def auto_run(cls_sets, tmp_path_factory):
    model, calib, held = cls_sets
    cache = tmp_path_factory.mktemp("cache") / "cls.cache"
    settings = Int8Settings(unverified=True, early_stop=False, method="auto", cache_path=cache, auto_per_tensor=True, auto_bias_correction=True)
    return quantize_int8(model, settings, calib, eval_samples=held), cache


def test_each_tensor_takes_the_candidate_its_readers_like_far_better(cls_sets, auto_run):
    model, calib, _ = cls_sets
    res, _ = auto_run
    mix = res.report.per_tensor
    assert mix is not None and set(mix.methods) == set(mix.scales)
    options = res.report.calibration_choice
    labels = [o.label for o in options]
    assert labels[-1] == PER_TENSOR and len(labels) == len(AUTO_CANDIDATES) + 1
    base, _ = best_option(options[:-1])  # the whole-model winner the mix starts from
    assert base in mix.methods.values() and len(set(mix.methods.values())) > 1  # a real mix
    work = _prepare(model, Int8Settings(unverified=True))[0]
    placed = res.report.placed
    samples = list(calib)[:8]
    whole = {lab: _candidate_scales(res, lab, mix) for lab in labels[:-1]}
    again = per_tensor_choice(work, placed, set(), whole, samples, base=base)
    assert again.methods == mix.methods and again.scales == mix.scales  # the same measurements, the same mix
    free = per_tensor_choice(work, placed, set(), whole, samples)  # no winner: every tensor its own argmin
    switched = {t for t, m in mix.methods.items() if m != base}
    assert switched and switched <= {t for t, m in free.methods.items() if m != base}

    def total(scales):
        return sum(e.nmse for e in layer_errors(work, placed, scales, samples))
    # the layers' own error: the free argmin no worse than the mix, the mix no worse than the winner
    assert total(free.scales) <= total(mix.scales) * 1.02 <= total(whole[base]) * 1.02 * 1.02
    assert res.report.to_json()["per_tensor_methods"] == dict(sorted(mix.methods.items()))


def _candidate_scales(res, label, mix):
    """A whole-model candidate's scales, from a run with that method alone (same samples, same histograms)."""
    return {t: _ALONE[label][t] for t in mix.scales}


_ALONE: dict[str, dict[str, float]] = {}


@pytest.fixture(autouse=True, scope="module")
def _alone(cls_sets):
    model, calib, _ = cls_sets
    work = _prepare(model, Int8Settings(unverified=True))[0]
    # as the pipeline's FP16-remainder calibration: every float tensor exposed (its activation peaks), which
    # keeps ONNX Runtime from fusing across them; a session exposing fewer may differ in the last bits
    run = calibration_session(work, plan_qdq(work).activation_tensors(), peaks=True)
    candidates: dict[str, dict[str, float]] = {}
    collect_scales(run, calib, CalibSettings(), candidates=candidates)
    _ALONE.update(candidates)


def test_the_cache_sidecar_says_which_tensor_took_which_method(auto_run):
    res, cache = auto_run
    side = json.loads(cache.with_name(cache.name + ".key.json").read_text())
    assert side["chosen_method"] == res.report.chosen_method
    if res.report.chosen_method == PER_TENSOR:
        assert side["per_tensor_methods"] == dict(sorted(res.report.per_tensor.methods.items()))


def test_bias_correction_removes_the_shift_it_measured(cls_sets, auto_run):
    model, calib, _ = cls_sets
    res, _ = auto_run
    work = _prepare(model, Int8Settings(unverified=True))[0]
    scales = {p.tensor: p.scale for p in res.report.placed if p.kind == "activation"}
    samples = list(calib)[:8]
    shifts = bias_shifts(work, res.report.placed, scales, samples)
    layers = {(p.graph, p.node) for p in res.report.placed}
    assert shifts and max(float(np.abs(s).max()) for s in shifts.values()) > 1e-3
    n = apply_bias_shifts(work, shifts, layers, dry_run=True)
    assert n == len(shifts)  # PP-OCR cls: every Conv has (or gets) a bias, the Gemm/MatMul a C or an Add
    # a bias behind an Identity (how torch's exporter shares equal biases) still takes the correction
    shared = onnx.ModelProto()
    shared.CopyFrom(work)
    conv = next(c for c in shared.graph.node if c.op_type == "Conv" and len(c.input) > 2 and ("main", c.name) in shifts)
    shared.graph.node.insert(0, onnx.helper.make_node("Identity", [conv.input[2]], ["shared_bias"], name="share"))
    conv.input[2] = "shared_bias"
    assert apply_bias_shifts(shared, shifts, layers) == n
    value = next(i for i in shared.graph.initializer if i.name == conv.input[2])
    original = next(i for i in work.graph.initializer if i.name == next(
        c for c in work.graph.node if c.name == conv.name).input[2])
    assert np.allclose(onnx.numpy_helper.to_array(value),
                       onnx.numpy_helper.to_array(original) - shifts[("main", conv.name)], atol=1e-7)
    # each shadow (the layer with its inputs quantized) with its bias corrected: no mean shift left
    probe, shadows = probe_model(work, res.report.placed, scales)
    producer = {o: node for node in probe.graph.node for o in node.output}
    on_shadow = {("main", node_label(producer[got])): shifts[key] for key, (op, _, got) in shadows.items()
                 if key in shifts and key[0] == "main" and op != "MatMul"}  # a MatMul shadow has no Add after it
    assert apply_bias_shifts(probe, on_shadow, set(on_shadow)) == len(on_shadow) > 0
    after = mean_shifts(probe, shadows, samples)
    for key, s in shifts.items():
        if ("main", node_label(producer[shadows[key][2]])) in on_shadow:
            assert float(np.abs(after[key]).max()) < 1e-3 * float(np.abs(s).max()) + 1e-6, key
    bc = res.report.bias_correction
    assert bc is not None and bc.corrected == n
    # both pass the gate on cls (cosine ~1): kept exactly when the worst output cosine rose
    assert bc.kept == (bc.worst_cosine_with > bc.worst_cosine_without)
    corrected_biases = [i.name for i in res.model.graph.initializer if "_biascorrected" in i.name]
    assert bool(corrected_biases) == bc.kept
    assert res.report.to_json()["bias_correction"]["layers"] == n


def test_the_flags_reach_the_int8_stage():
    from trtconv.pipeline.build_settings import quantize_settings
    from trtconv.pipeline.quantize import int8_settings

    plain = int8_settings(quantize_settings("int8", {"calib_method": "auto"}))
    assert (plain.auto_per_tensor, plain.auto_bias_correction) == (False, True)  # the defaults
    flags = int8_settings(quantize_settings("int8", {"calib_method": "auto", "auto_per_tensor": True,
                                                     "no_bias_correction": True}))
    assert (flags.auto_per_tensor, flags.auto_bias_correction) == (True, False)



def test_a_cache_hit_replays_the_kept_bias_correction(cls_sets, auto_run):
    """A cache hit reads the scales and must give the model the calibration run gave: a kept bias
    correction travels in the cache's sidecar: a hit's model is the first model; with the correction taken out
    of the sidecar a hit gives the uncorrected model, and with the measured shifts written in as a kept
    correction the next hit must apply them."""
    model, calib, held = cls_sets
    first, cache = auto_run
    bc = first.report.bias_correction
    assert bc is not None and bc.shifts
    side_path = cache.with_name(cache.name + ".key.json")
    side = json.loads(side_path.read_text())
    assert ("bias_correction" in side) == bc.kept
    settings = Int8Settings(unverified=True, early_stop=False, method="auto", cache_path=cache, auto_per_tensor=True, auto_bias_correction=True)
    again = quantize_int8(model, settings, calib, eval_samples=held)
    assert again.report.cache.hit
    assert again.model.SerializeToString() == first.model.SerializeToString()

    plain_side = {k: v for k, v in side.items() if k != "bias_correction"}  # the same scales, no correction
    side_path.write_text(json.dumps(plain_side))
    plain = quantize_int8(model, settings, calib, eval_samples=held)
    assert plain.report.cache.hit and not (plain.report.bias_correction and plain.report.bias_correction.kept)
    kept = type(bc)(bc.shifts, bc.worst_cosine_without, bc.worst_cosine_with, True, bc.corrected)
    side_path.write_text(json.dumps({**plain_side, "bias_correction": kept.stored()}))
    replayed = quantize_int8(model, settings, calib, eval_samples=held)
    assert replayed.report.cache.hit
    rb = replayed.report.bias_correction
    assert rb is not None and rb.kept and rb.corrected == bc.corrected
    assert all(np.array_equal(rb.shifts[k], bc.shifts[k]) for k in bc.shifts)
    biases = {t.name: onnx.numpy_helper.to_array(t) for t in replayed.model.graph.initializer}
    before = {t.name: onnx.numpy_helper.to_array(t) for t in plain.model.graph.initializer}
    changed = [n for n, v in biases.items() if n not in before or not np.array_equal(before[n], v)]
    assert changed, "the replayed correction changed no bias"
