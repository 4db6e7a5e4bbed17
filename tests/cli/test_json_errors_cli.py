"""With --json, every command's failure prints JSON on stdout (issue 26, item 9): a CI script that
parses stdout gets an error object, with the exit code, instead of nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from interrupts import interrupt_while_loading_command
from realmodels import rapidocr_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


def _not_onnx(folder: Path) -> Path:
    path = folder / "broken.onnx"
    path.write_bytes(b"this is not a protobuf at all" * 10)
    return path


CASES = {  # id: (argv builder, exit code)
    "check-invalid-model": (lambda d: ["check", _not_onnx(d), "--json"], ExitCode.INVALID_MODEL),
    "rewrite-invalid-model": (lambda d: ["rewrite", _not_onnx(d), "-o", d / "o.onnx", "--json"],
                              ExitCode.INVALID_MODEL),
    "quantize-int8-without-data": (lambda d: ["quantize", rapidocr_model("cls"), "-o", d / "q.onnx",
                                              "--precision", "int8", "--int8-unverified", "--json"], ExitCode.USAGE),
    "verify-missing-engine": (lambda d: ["verify", d / "none.engine", "--onnx", rapidocr_model("cls"), "--json"],
                              ExitCode.USAGE),
    "bench-missing-engine": (lambda d: ["bench", d / "none.engine", "--json"], ExitCode.USAGE),
    "verify-usage-error-from-click": (lambda d: ["verify", d / "none.engine", "--json"], ExitCode.USAGE),
    "build-invalid-model": (lambda d: ["build", _not_onnx(d), "-o", d / "m.engine", "--json"],
                            ExitCode.INVALID_MODEL),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failing_command_prints_a_json_error_object_on_stdout(case, tmp_path):
    argv, code = CASES[case]
    res = CliRunner().invoke(cli, [str(a) for a in argv(tmp_path)])
    assert res.exit_code == code, res.output
    doc = json.loads(res.stdout)  # one JSON document, nothing else
    assert doc["error"]["exit_code"] == code
    assert doc["error"]["message"] and doc["error"]["message"] in res.stderr  # the same words as the error line
    assert "trtconv: error:" in res.stderr


def test_without_json_stdout_stays_empty_on_failure(tmp_path):
    res = CliRunner().invoke(cli, ["check", str(_not_onnx(tmp_path))])
    assert res.exit_code == ExitCode.INVALID_MODEL and res.stdout == ""


def test_ctrl_c_before_the_command_runs_still_prints_json(tmp_path):
    """A Ctrl-C in the first second (while the CLI loads the command's module) is exit 130 with the
    same JSON error object as one during the work: stdout is never empty under --json."""
    res = interrupt_while_loading_command("trtconv.cli.quantize_command", [
        "quantize", str(rapidocr_model("cls")), "-o", str(tmp_path / "q.onnx"), "--precision", "fp16", "--json"])
    assert "signal while loading" in res.stderr, res.stderr
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr
    doc = json.loads(res.stdout)
    assert doc["error"]["name"] == "INTERRUPTED" and doc["command"] == "quantize"
    assert list(tmp_path.iterdir()) == []


def test_a_missing_choice_option_is_one_line_with_its_hint_in_the_json_too(tmp_path):
    """click lists a missing option's choices on lines of their own; trtconv's error is one line."""
    res = CliRunner().invoke(cli, ["quantize", str(rapidocr_model("cls")), "-o", str(tmp_path / "q.onnx"), "--json"])
    assert res.exit_code == ExitCode.USAGE
    error, hint = res.stderr.splitlines()  # (CliRunner names the program `cli`; the installed one is `trtconv`)
    assert error == "trtconv: error: Missing option '--precision'. Choose from: fp16, int8", res.stderr
    assert hint.endswith(" quantize --help` lists the options"), hint
    err = json.loads(res.stdout)["error"]
    assert err["message"] == "Missing option '--precision'. Choose from: fp16, int8"
    assert err["hint"] == hint.removeprefix("  hint: ")
