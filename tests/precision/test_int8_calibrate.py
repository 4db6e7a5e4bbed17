"""Calibrators against hand-computed cases and an independent straight-loop implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtconv.precision.int8.calib_cache import (
    decode_scale,
    encode_scale,
    format_cache,
    parse_cache,
    trt_version_number,
)
from trtconv.precision.int8.calibrators import (
    AbsHistogram,
    Calibrator,
    CalibSettings,
    entropy_search,
    entropy_threshold,
    scale_from_threshold,
)


def _kl(p, q):
    sp, sq = sum(p), sum(q)
    return sum(a / sp * math.log((a / sp) / (b / sq)) for a, b in zip(p, q) if a > 0)


def test_entropy_hand_computed_small_case():
    # hist (zero bin is replaced by its neighbour: [2, 2, 2, 0, 1]), 2 levels, candidates 2..5
    best, divs = entropy_search(np.array([5.0, 2, 2, 0, 1]), levels=2, start=2)
    # i=2: P=[2, 2+3 outliers], Q: one bin per level = [2, 2]
    assert divs[2] == pytest.approx(_kl([2, 5], [2, 2]), rel=1e-12)
    # i=3: levels floor(j*2/3) = [0, 0, 1]; P=[2, 2, 2+1]; Q=[4/2, 4/2, 2]
    assert divs[3] == pytest.approx(_kl([2, 2, 3], [2, 2, 2]), rel=1e-12)
    assert divs[3] == pytest.approx(0.0196201, abs=1e-6)
    # i=4: the last bin is empty in Q but holds the outlier in P -> infinite
    assert math.isinf(divs[4])
    # i=5: nothing clipped, Q reproduces P exactly
    assert divs[5] == pytest.approx(0.0, abs=1e-12)
    assert best == 5
    assert entropy_threshold(np.array([5.0, 2, 2, 0, 1]), 10.0, levels=2, start=2) == pytest.approx(10.0)


def _naive_entropy(hist, levels, start):
    """TensorRT's search written out as plain loops, independently of the vectorised one."""
    h = [float(x) for x in hist]
    h[0] = h[1]
    n = len(h)
    divs = [math.inf] * (n + 1)
    for i in range(start, n + 1):
        p = h[:i]
        p[-1] += sum(h[i:])
        groups: dict[int, list[int]] = {}
        for j in range(i):
            groups.setdefault(j * levels // i, []).append(j)
        q = [0.0] * i
        for js in groups.values():
            nonzero = [j for j in js if h[j] != 0]
            for j in nonzero:
                q[j] = sum(h[k] for k in js) / len(nonzero)
        if any(a > 0 and b == 0 for a, b in zip(p, q)) or sum(q) == 0:
            continue
        divs[i] = _kl(p, q)
    m = min(divs)
    return max(k for k, d in enumerate(divs) if d == m), divs


@pytest.mark.parametrize("seed", range(4))
def test_entropy_matches_straight_loops(seed):
    rng = np.random.default_rng(seed)
    x = np.abs(rng.standard_normal(4000) * rng.uniform(0.5, 2.0))
    hist = np.histogram(x, bins=96)[0].astype(float)
    hist[rng.integers(0, 96, 6)] = 0  # empty bins exercise the zero-preserving expansion
    best, divs = entropy_search(hist, levels=16)
    nbest, ndivs = _naive_entropy(hist, 16, 16)
    assert best == nbest
    finite = np.isfinite(ndivs)
    assert (np.isfinite(divs) == finite).all()
    np.testing.assert_allclose(divs[finite], np.asarray(ndivs)[finite], rtol=1e-9, atol=1e-12)


def test_entropy_clips_gaussian_tail_and_guard_limits_clipping():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000).astype(np.float32)
    unguarded = Calibrator(CalibSettings("entropy", max_clip=None))
    unguarded.update("t", x)
    th = unguarded.threshold("t")
    amax = float(np.abs(x).max())
    assert 2.5 < th < amax  # clips the tail, keeps the bulk
    # 90% small values, 10% far out in three spikes (as in PP-OCR rec's hard-swish outputs): KL clips
    # at least the top spike (3% of all values); the guard refuses to clip more than 0.1%.
    y = np.concatenate([rng.uniform(0, 0.04, 90_000), rng.choice(np.linspace(0.3, 0.4, 3), 9_000),
                        rng.uniform(0.28, 0.42, 1_000)]).astype(np.float32)
    raw = Calibrator(CalibSettings("entropy", max_clip=None))
    raw.update("y", y)
    guarded = Calibrator(CalibSettings("entropy", max_clip=0.001))
    guarded.update("y", y)
    assert raw.threshold("y") < 0.38  # the spike at 0.4 (3% of values) is clipped
    assert guarded.threshold("y") > 0.4 and "y" in guarded.guarded


def test_minmax_and_percentile_hand_computed():
    mm = Calibrator(CalibSettings("minmax"))
    mm.update("t", np.array([-3.0, 1.0, 2.0], np.float32))
    mm.update("t", np.array([0.5, -1.0], np.float32))
    assert mm.threshold("t") == 3.0
    assert scale_from_threshold(3.0) == pytest.approx(3.0 / 127, rel=1e-7)
    pc = Calibrator(CalibSettings("percentile", percentile=99.9))
    values = np.arange(1, 1001, dtype=np.float32)  # |x| = 1..1000: the 99.9th percentile is 999
    pc.update("t", values[:500])
    pc.update("t", -values[500:])
    assert pc.threshold("t") == pytest.approx(999.0, abs=0.1)


def test_histogram_grows_by_exact_merging_with_bounded_memory():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1.0, 50_000).astype(np.float32)
    a[0] = 1.0
    b = rng.uniform(0, 3.5, 50_000).astype(np.float32)
    h = AbsHistogram(bins=1024)
    h.update(a)
    size = h.nbytes
    h.update(b)
    for _ in range(20):
        h.update(rng.uniform(0, 3.0, 10_000).astype(np.float32))
    assert h.range == 4.0 and h.amax == pytest.approx(float(b.max()))
    assert h.nbytes == size  # fixed size, whatever the number of samples
    assert h.counts.sum() == 50_000 * 2 + 200_000
    ref = AbsHistogram(bins=1024)
    ref.range = 4.0  # the same data binned in one go over the final range
    h2 = AbsHistogram(bins=1024)
    h2.update(a)
    h2.update(b)
    ref.update(np.concatenate([a, b, np.array([4.0], np.float32)]))
    ref.counts[-1] -= 1
    assert np.abs(h2.counts - ref.counts).sum() <= 4  # only values on a bin edge may differ


def test_empty_and_zero_tensors_get_unit_scale():
    c = Calibrator(CalibSettings("entropy"))
    c.update("z", np.zeros((4, 4), np.float32))
    assert c.threshold("z") == 0.0 and scale_from_threshold(0.0) == 1.0


def test_cache_text_format_is_tensorrts():
    assert encode_scale(0.125) == "3e000000"  # big-endian IEEE float32 bits
    assert decode_scale("3c010a14") == pytest.approx(0.00787594, rel=1e-6)
    assert trt_version_number("10.9") == 100900 and trt_version_number("8.6.1") == 80601
    text = format_cache({"input:0": 0.125, "conv_out": 0.5}, "entropy", "11.4")
    assert text.splitlines() == ["TRT-110400-EntropyCalibration2", "conv_out: 3f000000", "input:0: 3e000000"]
    header, scales = parse_cache(text)
    assert header == "TRT-110400-EntropyCalibration2" and scales == {"conv_out": 0.5, "input:0": 0.125}
    # a cache TensorRT 8.5 wrote
    _, old = parse_cache("TRT-8501-EntropyCalibration2\ninput: 3c010a14\n")
    assert old["input"] == pytest.approx(0.00787594, rel=1e-6)
