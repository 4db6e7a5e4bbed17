"""Per-layer INT8 error (shadow layers, one ONNX Runtime pass) and the fewest-exclusions search."""

from __future__ import annotations

import onnx
import pytest
from realdata import ocr_line_images

from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.prepare import _prepare
from trtconv.precision.int8.sensitivity import fewest_exclusions, layer_errors
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs


@pytest.fixture(scope="module")
def cls_sets(ocr_cls, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sens")
    ocr_line_images(folder, range(8), flip_every=2)
    model = onnx.load(str(ocr_cls))
    src = SampleSource.detect(folder, ImagePreprocess.preset("ppocr-cls"))
    calib, held = SampleSet(src, model_inputs(model)).split(3)
    return model, calib, held


def test_an_absurd_scale_puts_its_layer_first(cls_sets):
    model, calib, held = cls_sets
    settings = Int8Settings(sensitivity=True)
    res = quantize_int8(model, settings, calib, eval_samples=held)
    errors = res.report.sensitivity
    layers = {(p.graph, p.node) for p in res.report.placed}
    assert {e.key for e in errors} == layers  # every quantized layer measured, each once
    assert all(0 <= e.nmse < 0.05 and e.cosine > 0.97 for e in errors), errors[:3]
    assert [e.nmse for e in errors] == sorted((e.nmse for e in errors), reverse=True)

    work = _prepare(model, settings)[0]
    mid = [p for p in res.report.placed if p.kind == "activation" and p.op_type == "Conv"][20]
    scales = {p.tensor: p.scale for p in res.report.placed if p.kind == "activation"}
    planted = layer_errors(work, res.report.placed, {**scales, mid.tensor: mid.scale * 1e4}, held)
    readers = {p.node for p in res.report.placed if p.tensor == mid.tensor}
    assert {e.node for e in planted[: len(readers)]} == readers
    assert planted[0].nmse > 0.5 and planted[len(readers)].nmse < 0.05


def test_fewest_exclusions_finds_the_needed_set_and_prunes():
    ranking = [("main", n) for n in "abcdefgh"]
    calls: list[frozenset] = []

    def passes(without: frozenset) -> bool:
        calls.append(without)
        return {("main", "b"), ("main", "e")} <= without

    assert fewest_exclusions(ranking, passes) == (("main", "b"), ("main", "e"))
    assert len(calls) < 16
    assert fewest_exclusions(ranking, lambda w: False) is None
    assert fewest_exclusions(ranking, lambda w: True) == (("main", "a"),)
    assert fewest_exclusions([], lambda w: True) is None
