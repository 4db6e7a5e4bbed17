"""`--report FILE.html` on check, rewrite, quantize and build, opened in a real headless Chromium:
the page loads with no console error and no request beyond the file itself, and shows the
elements each command promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import cls_calibration, dcn_model, two_inputs_one_dim_name
from click.testing import CliRunner
from realmodels import rapidocr_model

from trtconv.cli.main import cli

COUNT = "document.querySelectorAll({!r}).length"
TEXT = "(document.querySelector({!r}) || {{}}).textContent || ''"


def _run(*args: object) -> tuple[int, str, str]:
    """(exit code, stdout and stderr, stdout alone: what --json prints)."""
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.output, res.stdout


def _open(browser, page: Path, **expressions: str) -> dict:
    assert page.is_file()
    loaded = browser.load(page, expressions)
    assert loaded.errors == [], loaded.errors
    assert loaded.requests == [page.resolve().as_uri()], loaded.requests  # nothing but the file itself
    return loaded.values


# The report's pages are under test, not auto's choice of method (several whole-model candidates, each
# calibrated and judged): one method calibrates (tests/cli/test_int8_gate_cli.py runs auto on every model).
ONE_METHOD = ("--calib-method", "minmax")


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> Path:
    return cls_calibration(tmp_path_factory.mktemp("calib") / "lines", n=8)


def test_check_and_rewrite_reports_show_node_verdicts_and_rewrite_proofs(browser, tmp_path):
    model = dcn_model(tmp_path / "dcn.onnx")
    code, out, stdout = _run("check", model, "--report", tmp_path / "check.html")
    assert code == 4, out  # needs a rewrite
    got = _open(browser, tmp_path / "check.html", rows=COUNT.format("#node-verdicts tbody tr"),
                table=TEXT.format("#node-verdicts"))
    assert got["rows"] == 1 and "dcn0" in got["table"] and "rewritable" in got["table"]

    code, out, stdout = _run("rewrite", model, "-o", tmp_path / "rw.onnx", "--report", tmp_path / "rewrite.html")
    assert code == 0, out
    got = _open(browser, tmp_path / "rewrite.html", rows=COUNT.format("#rewrites tbody tr"),
                table=TEXT.format("#rewrites"))
    assert got["rows"] == 1 and "dcn0" in got["table"] and "passed" in got["table"]


def test_check_report_shows_the_dynamic_inputs_table_the_text_output_has(browser, tmp_path):
    model = two_inputs_one_dim_name(tmp_path)  # a [1, n] and b [1, n]
    code, out, stdout = _run("check", model, "--trt", "rtx", "--shapes", "a:1x4", "--report", tmp_path / "c.html")
    assert code == 0, out
    assert "dynamic inputs" in out and "not given" in out  # the text output's table, which the page must show too
    got = _open(browser, tmp_path / "c.html", rows=COUNT.format("#dynamic-inputs tbody tr"),
                table=TEXT.format("#dynamic-inputs"))
    assert got["rows"] == 2
    assert "a[1, n]1x4" in got["table"] and "b[1, n]not given" in got["table"]


def test_quantize_report_without_data_never_says_passed(browser, tmp_path):
    code, out, _ = _run("quantize", rapidocr_model("cls"), "-o", tmp_path / "q.onnx", "--precision", "fp16",
                        "--report", tmp_path / "q.html")
    assert code == 0, out
    got = _open(browser, tmp_path / "q.html", subtitle=TEXT.format("#subtitle"))
    assert got["subtitle"] == "succeeded (exit 0): written; accuracy gate not checked (no sample data)", got


def test_quantize_report_shows_kept_nodes_and_the_gate_with_a_per_sample_plot(browser, lines, tmp_path):
    code, out, stdout = _run("quantize", rapidocr_model("cls"), "-o", tmp_path / "q.onnx", "--precision", "int8", "--int8-unverified",
                     "--calib-data", lines, "--min-cosine", "0", "--json", "--report", tmp_path / "q.html", *ONE_METHOD)
    assert code == 0, out
    doc = json.loads(stdout)
    held_out = doc["int8"]["accuracy_samples"]
    got = _open(browser, tmp_path / "q.html", kept=COUNT.format("#kept-out tbody tr"),
                gate=COUNT.format("#accuracy-gate tbody tr"), dots=COUNT.format("svg.cosine-plot circle"))
    assert got["kept"] == len(doc["int8"]["skipped"]) + len((doc["int8"]["fp16_remainder"] or {}).get("kept") or [])
    assert got["gate"] == len(doc["accuracy"]) and held_out > 0
    assert got["dots"] == held_out * len(doc["accuracy"])  # one dot per held-out sample and output


def test_build_report_shows_every_section_and_the_engine_layers(browser, lines, tmp_path):
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    engine, page = tmp_path / "cls.engine", tmp_path / "build.html"
    code, out, stdout = _run("build", rapidocr_model("cls"), "-o", engine, "--trt", "rtx", "--precision", "int8", "--int8-unverified",
                     "--calib-data", lines, "--shapes", "x:1x3x48x192", "--min-cosine", "0", "--report", page, *ONE_METHOD)
    assert code == 0, out
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    assert manifest["calibration"]["unverified"] is True  # --int8-unverified on a few samples: said so
    got = _open(browser, page, sections="[...document.querySelectorAll('section')].map(s => s.id).join(' ')",
                layers=COUNT.format("#engine-layers tbody tr"), manifest=TEXT.format("#manifest"),
                dots=COUNT.format("svg.cosine-plot circle"), subtitle=TEXT.format("#subtitle"),
                engine=TEXT.format("#engine-run"))
    assert got["sections"].split() == ["verification-section", "nodes-section", "inputs-section", "rewrites-section",
                                       "kept-out-section", "samples-section", "accuracy-section", "layers-section",
                                       "manifest-section"]
    # the RTX engine was never run: the page says so, never "passed" (issue 35)
    assert got["subtitle"].startswith("succeeded (exit 0): engine built, not run: TensorRT-RTX") and \
        "passed" not in got["subtitle"], got["subtitle"]
    assert got["engine"].startswith("engine built, not run: ")
    assert got["layers"] == len(manifest["layers"]["layers"])
    assert manifest["identity"]["hash"] in got["manifest"]
    assert got["dots"] > 0


def test_a_failed_gate_still_writes_the_report_and_it_says_what_failed(browser, lines, tmp_path):
    page = tmp_path / "failed.html"
    code, out, _ = _run("quantize", rapidocr_model("cls"), "-o", tmp_path / "q.onnx", "--precision", "int8", "--int8-unverified",
                        "--calib-data", lines, "--max-abs", "1e-12", "--no-auto-exclude", "--report", page, *ONE_METHOD)
    assert code == 7, out
    assert not (tmp_path / "q.onnx").exists()
    got = _open(browser, page, subtitle=TEXT.format("#subtitle"), verdicts=TEXT.format("#accuracy-gate"))
    assert got["subtitle"].startswith("failed (exit 7)")
    assert "fail" in got["verdicts"]
