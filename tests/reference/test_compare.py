"""Output comparison and the ORT reference runner, on a real model."""

from __future__ import annotations

import numpy as np
import pytest

from trtconv.errors import UsageError
from trtconv.load import load_model
from trtconv.reference.compare import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    compare_arrays,
    compare_outputs,
    parse_limit,
    thresholds_with,
    violations,
)
from trtconv.reference.ort import random_feeds, run_model, session


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


def test_scalar_outputs_compare():
    """A 0-d output (a count, a score) compares like any other: float, with a NaN, and integer."""
    s = compare_arrays("count", np.array(0.25), np.array(0.5, np.float32))
    assert s.shape == () and s.max_abs == pytest.approx(0.25) and s.max_rel == pytest.approx(1.0)
    assert compare_arrays("n", np.array(7.0, np.float32), np.array(np.nan, np.float32)).nonfinite == 1
    assert compare_arrays("k", np.array(3, np.int64), np.array(5, np.int64)).max_abs == 2.0


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


def test_per_output_limits_and_gating_only_named_outputs():
    ref = np.linspace(-1, 1, 50, dtype=np.float32)
    boxes = compare_arrays("boxes", ref, ref)
    scores = compare_arrays("scores", ref, ref + np.float32(0.3) * np.sin(np.arange(50, dtype=np.float32)))
    assert 0.9 < scores.cosine < 0.995
    base = Thresholds(min_cosine=0.9)
    assert violations([boxes, scores], base) == []
    strict = thresholds_with(base, {"min_cosine": [("scores", 0.995)]})
    assert [m.split(":")[0] for m in violations([boxes, scores], strict)] == ["scores"]
    assert strict.for_output("boxes") == Thresholds(min_cosine=0.9)
    assert strict.for_output("scores").min_cosine == 0.995
    only_boxes = thresholds_with(strict, {}, only=["boxes"])
    assert violations([boxes, scores], only_boxes) == [] and only_boxes.for_output("scores") is None
    assert only_boxes.outputs_named() == {"boxes", "scores"}
    glob = thresholds_with(DEFAULT_THRESHOLDS["int8"], {"min_cosine": [(None, 0.999)], "max_abs": [("boxes", 0.0)]})
    assert glob.min_cosine == 0.999 and glob.to_json() == {"min_cosine": 0.999, "per_output": {"boxes": {"max_abs": 0.0}}}


@pytest.mark.parametrize("text,expected", [("0.995", (None, 0.995)), ("scores=0.5", ("scores", 0.5)),
                                           ("a=b=1", ("a=b", 1.0))])
def test_parse_limit(text, expected):
    assert parse_limit(text) == expected


def test_parse_limit_rejects_words():
    with pytest.raises(ValueError):
        parse_limit("scores=high")


def test_sessions_pool_threads_sleep_between_runs(ocr_cls):
    """No spinning pool threads: trtconv's numpy work between runs keeps the cores (docs/benchmarks.md)."""
    opts = session(ocr_cls).get_session_options()
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
