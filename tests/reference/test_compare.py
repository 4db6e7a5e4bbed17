"""Output comparison and the ORT reference runner, on a real model."""

from __future__ import annotations

import numpy as np
import pytest

from trtconv.errors import UsageError
from trtconv.load import load_model
from trtconv.reference.compare import Thresholds, compare_arrays, compare_outputs, violations
from trtconv.reference.ort import random_feeds, run_model


def test_stats_hand_computed():
    ref = np.array([[1.0, 2.0, 3.0], [0.0, 5.0, -1.0]], dtype=np.float32)
    got = np.array([[1.0, 2.5, 3.0], [0.0, 4.0, np.nan]], dtype=np.float32)
    s = compare_arrays("y", ref, got, top1=True)
    assert s.max_abs == pytest.approx(1.0)
    assert s.mean_abs == pytest.approx(1.5 / 5)
    assert s.max_rel == pytest.approx(0.25)
    assert s.nonfinite == 1
    assert s.top1_agreement == 0.5  # the NaN row disagrees
    msgs = violations([s], Thresholds(max_abs=0.5, min_cosine=0.9999))
    assert any("NaN/Inf" in m for m in msgs) and any("max abs" in m for m in msgs)
    assert violations([compare_arrays("y", ref, ref)], Thresholds(max_abs=0.0, min_cosine=1.0)) == []


def test_real_model_self_comparison_and_feeds(ocr_cls):
    model = load_model(ocr_cls).proto
    with pytest.raises(UsageError, match="dynamic dims"):
        random_feeds(model)
    feeds = random_feeds(model, {"x": (2, 3, 48, 192)}, seed=1)
    assert np.array_equal(feeds["x"], random_feeds(model, {"x": (2, 3, 48, 192)}, seed=1)["x"])
    a = run_model(model, feeds)
    b = run_model(model, {"x": feeds["x"] + 1e-3})
    [s] = compare_outputs(a, b, top1=True)
    assert s.shape == (2, 2) and 0 < s.max_abs < 0.1 and s.cosine > 0.99
