"""Calibration chosen by the data (issue 27, Deliver 1): the MSE search, and ``method="auto"``.

``auto`` calibrates once, derives every candidate's scales from the same histograms, measures
each candidate model on the held-out samples and keeps the best: the scales it keeps are
exactly those the chosen method gives on its own, the report lists every candidate with its
score and why the chosen one won, and the cache holds the choice.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from realdata import ocr_det_images

from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.calibrators import AUTO_CANDIDATES, AbsHistogram, mse_threshold
from trtconv.samples.sources import ImagePreprocess, SampleSet, SampleSource, model_inputs


def _int8_mse(x: np.ndarray, t: float) -> float:
    s = t / 127
    return float(np.mean((np.clip(np.round(x / s), -127, 127) * s - x) ** 2))


@pytest.mark.parametrize("dist", ["normal", "laplace", "relu-outlier"])
def test_mse_threshold_minimises_the_real_quantization_error(dist):
    rng = np.random.default_rng(3)
    x = {"normal": rng.standard_normal(400_000), "laplace": rng.laplace(size=400_000),
         "relu-outlier": np.concatenate([np.maximum(rng.standard_normal(400_000), 0), [40.0]])}[dist].astype(np.float32)
    h = AbsHistogram()
    h.update(x)
    t = mse_threshold(h.over_amax(2048), h.amax)
    assert 0 < t <= h.amax
    best = _int8_mse(x, t)
    for other in (h.amax, h.percentile(99.99), 0.8 * t, 1.25 * t):  # min-max, percentile, either side
        assert best <= _int8_mse(x, other) * 1.01, (dist, t, other)


def test_auto_keeps_the_candidate_that_agrees_best_and_its_scales_are_that_methods(ocr_det, tmp_path):
    ocr_det_images(tmp_path / "det", range(6), sizes=((224, 288), (256, 224), (192, 320)))
    model = onnx.load(ocr_det)
    calib, held = SampleSet(SampleSource.detect(tmp_path / "det", ImagePreprocess.preset("ppocr-det")),
                            model_inputs(model)).split(2)
    cache = tmp_path / "det.cache"
    # bias correction off: the model must be exactly the chosen method's (bias correction: test_int8_auto_parts)
    auto = Int8Settings(method="auto", cache_path=cache, auto_bias_correction=False)
    res = quantize_int8(model, auto, calib, eval_samples=held)
    r = res.report
    assert r.per_tensor is None and r.bias_correction is None  # neither tried: off
    options = r.calibration_choice
    assert [o.label for o in options] == [m if p is None else f"{m}-{p:g}" for m, p in AUTO_CANDIDATES]
    chosen = [o for o in options if o.chosen]
    assert len(chosen) == 1 and chosen[0].label == r.chosen_method
    assert (chosen[0].passes, chosen[0].worst_cosine) == max((o.passes, o.worst_cosine) for o in options)
    assert min(st.cosine for st in r.accuracy) == pytest.approx(chosen[0].worst_cosine, abs=1e-6)
    assert len({o.worst_cosine for o in options}) > 1  # the candidates really differ
    method, _, pct = r.chosen_method.partition("-")
    alone = quantize_int8(model, Int8Settings(method=method, percentile=float(pct) if pct else 99.99),
                          calib, eval_samples=held)
    assert alone.report.scales == r.scales
    assert alone.model.SerializeToString() == res.model.SerializeToString()
    again = quantize_int8(model, auto, calib, eval_samples=held)
    assert again.report.cache.hit and again.report.chosen_method == "cache" and again.report.scales == r.scales
    doc = r.to_json()
    assert doc["chosen_method"] == r.chosen_method and len(doc["calibration_choice"]) == len(AUTO_CANDIDATES)
