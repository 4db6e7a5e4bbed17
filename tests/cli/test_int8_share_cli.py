"""``--auto-exclude`` knows its limits and its cost (issue 27, Deliver 2).

The search respects ``--min-precision-share`` from the start: it tries the most it may keep
out of INT8 first and, when the gate still fails there, stops at once with one line and
exit 8. The report counts the full-model evaluations the gate spent, and the sensitivity
table marks the layers kept out.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
from click.testing import CliRunner
from realdata import ocr_det_images, silero_samples

from trtconv.cli.main import cli
from trtconv.cli.precision_report import gate_line, print_int8
from trtconv.errors import ExitCode


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_an_unreachable_share_stops_after_one_check_in_seconds(ocr_det, tmp_path, capsys):
    ocr_det_images(tmp_path / "det", range(5), sizes=((224, 288), (256, 224), (192, 320)))
    args = ("quantize", ocr_det, "-o", tmp_path / "det.onnx", "--precision", "int8", "--int8-unverified", "--calib-data", tmp_path / "det",
            "--preprocess", "preset=ppocr-det", "--auto-exclude", "--min-cosine", "0.9999", "--calib-method", "entropy")
    t0 = time.perf_counter()
    res = _invoke(*args, "--min-precision-share", "0.6", "--json", "--report", tmp_path / "det.html")
    seconds = time.perf_counter() - t0
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    doc = json.loads(res.stdout)  # the numbers behind the refusal (issue 32.3, 35.6)
    assert doc["error"]["exit_code"] == 8 and doc["written"] is False
    rows = doc["int8"]["sensitivity"]
    assert len(rows) > 50 and all(r["nmse"] >= 0 and "cosine" in r for r in rows)
    assert [r["nmse"] for r in rows] == sorted((r["nmse"] for r in rows), reverse=True)
    assert 0 < doc["share_needed_below"] < 0.6 < doc["int8_share"]
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, res.stderr
    line = errors[0]
    m = re.search(r"INT8 needs more than (\d+) of (\d+) layers excluded to pass the gate; below the share "
                  r"\(60% in INT8; the gate needs at most \d+%\); use fp16 or lower it \(stopped after 1 candidate "
                  r"check\(s\), (\d+) full-model", line)
    assert f"the gate needs at most {doc['share_needed_below']:.0%}" in line
    assert m, line
    budget, layers, evaluations = map(int, m.groups())
    assert 0 < budget < layers * 0.4 + 1 and layers > 50
    assert evaluations <= 6  # reference, candidate and its FP16 twin, one sensitivity session, one check (x2)
    assert not (tmp_path / "det.onnx").exists()
    assert seconds < 120, seconds  # one check, not the whole search (minutes on larger models)
    # the text report's gate line: there was sample data, the refusal came before the judgement
    assert gate_line({**doc, "written": False}) == "accuracy gate: not reached (refused first: see the error line)"
    capsys.readouterr()
    print_int8({**doc, "written": False})
    (parts,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("samples: ")]
    # the judging part was drawn and set aside, never judged: said with its count in text, JSON and HTML (it said
    # "judging 0" in --json and left the part out of the text)
    judging = doc["samples_per_part"]["judging"]
    assert judging == 2 and doc["held_out_samples"] == 0 and doc["claim"] is None
    said = f", judging {judging} (the judging part set aside, not judged: refused before the judgement)"
    assert parts.endswith(said), parts
    assert "samples: " + parts.removeprefix("samples: ") in (tmp_path / "det.html").read_text()


def test_auto_exclude_is_the_default_marks_the_excluded_layers_and_counts_its_evaluations(silero, tmp_path):
    """Auto-exclusion and --calib-method auto are on by default (a user asking for INT8 expects an INT8 model
    that passes the gate, within --min-precision-share, not a refusal and a hint). On this Silero data auto's
    choice passes with every layer in INT8; entropy's scales miss the gate, and then, with no flag, the
    layers that break it stay out."""
    folder = tmp_path / "vad"
    folder.mkdir()
    s16 = silero_samples(silero, range(1), seconds=1.5, every=3)
    s8 = silero_samples(silero, range(1), seconds=1.5, every=3, sr=8000)
    for i, sample in enumerate(x for pair in zip(s16, s8) for x in pair):
        np.savez(folder / f"{i:03d}.npz", **sample)
    # 0.97: with the honest split (issue 32) some judged Silero windows miss 0.99 whatever is excluded
    base = ("quantize", silero, "-o", tmp_path / "vad.onnx", "--precision", "int8", "--int8-unverified", "--calib-data", folder,
            "--force", "--min-cosine", "0.97")
    default = _invoke(*base, "--json")
    assert default.exit_code == 0, default.output
    d = json.loads(default.stdout)["int8"]
    assert d["method"] == "auto" and d["calibration_choice"] and not d["violations"]  # chosen, then judged
    args = (*base, "--calib-method", "entropy", "--min-cosine", "0.99")  # the last limit given wins
    refused = _invoke(*args, "--no-auto-exclude", "--json")
    assert refused.exit_code == ExitCode.ACCURACY, refused.output  # entropy's full-INT8 model misses the gate
    res = _invoke(*args, "--json")
    # the search passes on the selection samples; the judging ones may still show that entropy with exclusions
    # does not hold on unseen windows (exit 7, the report kept): the search's marks and costs are the subject
    assert res.exit_code in (0, ExitCode.ACCURACY), res.output
    r = json.loads(res.stdout)["int8"]
    assert r["auto_excluded"], "the test data needs auto-exclude on Silero with entropy"
    assert len(r["auto_excluded"]) <= len(r["sensitivity"]) / 2  # the default --min-precision-share: 0.5
    marked = [e["node"] for e in r["sensitivity"] if e["excluded"]]
    assert sorted(marked) == sorted(r["auto_excluded"])
    per_candidate = 2  # the candidate and its exact-rounding FP16 twin
    assert r["sensitivity_sessions"] == 1
    # the selection samples: reference, the first candidate, each check; the judging ones: reference, the final
    assert r["gate_evaluations"] == 2 * (1 + per_candidate) + per_candidate * r["gate_checks"] + r["sensitivity_sessions"]
    text = _invoke(*args)
    assert text.exit_code == res.exit_code, text.output
    assert f"gate cost: {r['gate_evaluations']} full-model evaluations" in text.stdout
    assert "excluded" in text.stdout.split("error each quantized layer adds")[1]


def test_build_refused_before_the_judgement_says_so_not_no_sample_data(ocr_det, tmp_path):
    """``build``'s exit 8 from its precision stage: the gate line said "not checked (no sample data)" though the
    data was there and a part of it set aside for judging; it now says what ``quantize`` says."""
    ocr_det_images(tmp_path / "det", range(5), sizes=((224, 288), (256, 224), (192, 320)))
    res = _invoke("build", ocr_det, "-o", tmp_path / "det.engine", "--trt", "rtx", "--precision", "int8",
                  "--int8-unverified", "--calib-data", tmp_path / "det", "--preprocess", "preset=ppocr-det",
                  "--auto-exclude", "--min-cosine", "0.9999", "--calib-method", "entropy", "--min-precision-share", "0.6")
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    assert "accuracy gate: not reached (refused first: see the error line)" in res.stdout, res.stdout
    assert "no sample data" not in res.stdout
    assert "(the judging part set aside, not judged: refused before the judgement)" in res.stdout
    assert not (tmp_path / "det.engine").exists()
