"""FP16's accuracy check reports its progress as it runs, one step per model run: a log in a pipe said
"checking accuracy with ONNX Runtime: 1/60 (67 s)" once the check had in fact finished, because the
count was reported only after both passes over the samples."""

from __future__ import annotations

import onnx
from realdata import ocr_line_images

from trtconv.precision.fp16 import convert_fp16
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs


def test_accuracy_steps_are_reported_while_the_model_runs(ocr_cls, tmp_path):
    model = onnx.load(ocr_cls)
    ocr_line_images(tmp_path, range(4))
    samples = SampleSet(SampleSource.detect(tmp_path, ImagePreprocess.preset("ppocr-cls")), model_inputs(model))
    seen: list[tuple[int, int | None]] = []
    convert_fp16(model, samples=samples,
                 progress=lambda stage, done, total: seen.append((done, total))
                 if stage == "accuracy" else None)
    done = [d for d, _ in seen]
    # the peaks pass's FP32 outputs are the reference: the FP16 model and its exact-rounding twin, 4 samples each
    assert done == list(range(9)) and {t for _, t in seen} == {8}
