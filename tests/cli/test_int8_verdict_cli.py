"""The INT8 gate's verdict says what it rests on (issue 27, Deliver 3).

A pass on a handful of held-out samples is qualified ("passed on n=2 samples: weak") in the
human output and in ``--json`` alike; the verdict carries the number of held-out samples and
each output's worst sample; given more data, more is held out and the qualifier goes.
"""

from __future__ import annotations

import json

from click.testing import CliRunner
from realdata import ocr_line_images

from trtconv.cli.main import cli
from trtconv.precision.int8 import WEAK_BELOW


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _quantize(model, folder, out, *extra):
    return _invoke("quantize", model, "-o", out, "--precision", "int8", "--calib-data", folder,
                   "--preprocess", "preset=ppocr-cls", "--force", *extra)


def test_a_pass_on_few_held_out_samples_is_weak_in_text_and_json(ocr_cls, tmp_path):
    ocr_line_images(tmp_path / "few", range(10), flip_every=2)  # 20 % held out: 2 samples
    res = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["passed"] is True and doc["held_out_samples"] == 2 < WEAK_BELOW
    assert doc["weak"] is True and doc["verdict"] == "passed on n=2 samples: weak"
    assert doc["int8"]["verdict"] == doc["verdict"]
    worst = {w["output"]: w for w in doc["worst_samples"]}
    assert set(worst) == {a["name"] for a in doc["accuracy"]}
    for w in worst.values():  # the worst sample is one of the two held out, named by its file
        assert w["index"] in (0, 1) and w["sample"].endswith((".png", ".jpg"))
        # per-sample cosines are float32 (pooled: float64): near 1 a sample's rounds up by up to ~6e-8
        assert w["cosine"] <= next(a["cosine"] for a in doc["accuracy"] if a["name"] == w["output"]) + 1e-6
    text = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx")
    assert text.exit_code == 0, text.output
    assert "accuracy gate: passed on n=2 samples: weak (held-out data;" in text.stdout
    assert "give more sample data" in text.stdout and "worst sample per output:" in text.stdout


def test_more_data_holds_more_out_and_the_pass_is_not_weak(ocr_cls, tmp_path):
    ocr_line_images(tmp_path / "many", range(40), flip_every=2)  # 20 % held out: 8 samples
    res = _quantize(ocr_cls, tmp_path / "many", tmp_path / "b.onnx", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["held_out_samples"] == WEAK_BELOW and doc["weak"] is False
    assert doc["verdict"] == f"passed on n={WEAK_BELOW} samples"
