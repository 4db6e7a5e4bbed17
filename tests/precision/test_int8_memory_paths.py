"""The INT8 stage's memory-saving paths give what the copying ones gave, on real models.

Issue 20: the opset upgrade converts the structure alone and puts the weights back; tensors
are exposed on the model itself, not a copy; the accuracy check runs one session at a time.
Each must be exactly equivalent to what it replaced (tests/cli/test_memory_bound.py holds
the memory itself).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import version_converter
from realdata import ocr_line_images

from trtconv.precision.expose import expose_tensors, session_exposing
from trtconv.precision.fp16 import Fp16Settings, convert_fp16
from trtconv.precision.int8 import upgrade_opset
from trtconv.precision.int8.accuracy import accuracy_report
from trtconv.precision.peaks import float_tensors
from trtconv.reference.ort import run, session
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs


def _bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def test_upgrade_on_the_structure_gives_the_converters_bytes(ocr_det, ocr_cls, ocr_rec):
    for path in (ocr_det, ocr_cls, ocr_rec):  # opset 12, 11, 12: every weight goes through the restore
        model = onnx.load(path)
        before = _bytes(model)
        upgraded, change = upgrade_opset(model, 19)
        assert change is not None and change[1] == 19
        assert _bytes(upgraded) == _bytes(version_converter.convert_version(model, 19)), path.name
        assert _bytes(model) == before  # the input is left alone


def test_session_exposing_leaves_the_model_alone_and_returns_what_a_copy_returns(ocr_cls, tmp_path):
    model = version_converter.convert_version(onnx.load(ocr_cls), 13)  # types inferred: float tensors known
    names = float_tensors(model)[:40]
    assert len(names) == 40
    ocr_line_images(tmp_path, range(2))
    sample = next(iter(SampleSet(SampleSource.detect(tmp_path, ImagePreprocess.preset("ppocr-cls")),
                                 model_inputs(model))))
    before = _bytes(model)
    sess, mapping = session_exposing(model, names, optimize=True)
    assert _bytes(model) == before
    exposed, copy_mapping = expose_tensors(model, names)
    assert mapping == copy_mapping
    got = run(sess, sample, list(mapping))
    want = run(session(exposed, optimize=True), sample, list(copy_mapping))
    for name in mapping:
        np.testing.assert_array_equal(got[name], want[name])


def test_accuracy_one_session_at_a_time_equals_all_at_once(ocr_cls, tmp_path):
    model = onnx.load(ocr_cls)
    candidate = convert_fp16(model, Fp16Settings(check_accuracy=False), None).model
    ocr_line_images(tmp_path, range(4), flip_every=2)
    samples = SampleSet(SampleSource.detect(tmp_path, ImagePreprocess.preset("ppocr-cls")), model_inputs(model))
    memo: list[dict[str, np.ndarray]] = []
    steps: list[tuple[int, int | None]] = []
    one_at_a_time = accuracy_report(model, candidate, samples, twins=(candidate,), total=4, memo=memo,
                                    progress=lambda _stage, done, total: steps.append((done, total)))
    all_at_once = accuracy_report(model, candidate, iter(list(samples)), twins=(candidate,))  # a one-shot iterator
    assert one_at_a_time == all_at_once
    assert one_at_a_time[1] == 4 and len(memo) == 4
    assert steps[-1] == (12, 12)  # reference, candidate and twin, 4 samples each
    again = accuracy_report(model, candidate, samples, memo=memo)  # the kept reference outputs are reused
    assert again[0] == one_at_a_time[0]
