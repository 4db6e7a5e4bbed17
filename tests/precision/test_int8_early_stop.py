"""Choosing stops measuring a candidate once it cannot win (issue 32, Deliver 4): the same choice, for less.

The bound a stop rests on must never fall below the score the full measurement gives (else a candidate that
would have won could be stopped), and the whole ``auto`` run must end with the same choice and the same model
as one that measures every candidate in full.
"""

from __future__ import annotations

import numpy as np
from builders import two_conv_net

from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, quantize_int8
from trtconv.precision.int8.accuracy import Cutoff, _Stop
from trtconv.reference import PooledStats, Thresholds, dot
from trtconv.samples.sources import ArraySamples


def _samples(seed: int, n: int) -> ArraySamples:
    rng = np.random.default_rng(seed)
    return ArraySamples(tuple({"x": rng.standard_normal((1, 4, 12, 12)).astype(np.float32)} for _ in range(n)))


def test_the_bound_never_falls_below_the_full_pooled_cosine():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(2, 9))
        refs = [{"y": (rng.standard_normal(50) * rng.uniform(0.1, 10)).astype(np.float32)} for _ in range(n)]
        gots = [{"y": r["y"] + (rng.standard_normal(50) * rng.uniform(0, 2)).astype(np.float32)} for r in refs]
        full = PooledStats("y", False)
        for r, g in zip(refs, gots):
            full.add(r["y"], g["y"])
        final = full.stats().cosine
        stop = _Stop(Cutoff(False, -2.0, Thresholds(min_cosine=0.5)), ["y"])
        stop.start(refs)
        acc = {"y": PooledStats("y", False)}
        for k, i in enumerate(rng.permutation(n)):
            acc["y"].add(refs[i]["y"], gots[i]["y"])
            stop.add(acc, refs[i], {}, last=k == n - 1, final=k == n - 1)
            assert stop.bound >= final - 1e-12, (trial, k)
        assert abs(stop.bound - final) < 1e-9  # every sample measured: the bound is the score


def test_dot_is_the_dot_product():
    a, b = np.random.default_rng(1).standard_normal((2, 10_001))
    assert abs(dot(a, b) - float(np.dot(a, b))) < 1e-9 * float(np.abs(a * b).sum())


def _auto(early_stop: bool):
    # a limit no candidate meets with margin, so that every one is measured (or stopped) and compared
    settings = Int8Settings(method="auto", unverified=True, early_stop=early_stop,
                            thresholds=Thresholds(min_cosine=0.9999))
    try:
        return quantize_int8(two_conv_net(), settings, _samples(1, 8), select_samples=_samples(2, 6),
                             eval_samples=_samples(3, 6))
    except Int8AccuracyError as exc:
        return exc.result


def test_stopping_early_chooses_what_measuring_every_candidate_chooses():
    every, early = _auto(False), _auto(True)
    full = {o.label: o for o in every.report.calibration_choice}
    options = early.report.calibration_choice
    assert early.report.chosen_method == every.report.chosen_method
    assert early.model.SerializeToString() == every.model.SerializeToString()
    bias, bias_every = early.report.bias_correction, every.report.bias_correction
    assert bias is not None and bias_every is not None and bias.kept == bias_every.kept
    assert [o.label for o in options] == list(full) and not any(o.stopped for o in full.values())
    stopped = [o for o in options if o.stopped]
    assert stopped  # the case stops some: percentile 99.9 loses to entropy within the selection samples
    chosen = next(o for o in options if o.chosen)
    for o in stopped:
        assert o.worst_cosine >= full[o.label].worst_cosine - 1e-12  # a bound of the full score
        assert o.worst_cosine < chosen.worst_cosine  # strictly below the best: no tie decided on part of the data
        assert o.to_json()["stopped_early"] is True
    for o in options:
        if not o.stopped:
            assert (o.worst_cosine, o.passes) == (full[o.label].worst_cosine, full[o.label].passes)
