"""The CLI's error policy: one line + hint, documented exit codes, no tracebacks."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from trtconv.cli.main import COMMANDS, cli
from trtconv.errors import ExitCode


def test_version_lists_components():
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].startswith("trtconv ")
    assert any(line.startswith("onnxruntime ") for line in lines)
    assert any(line.startswith("tensorrt ") for line in lines)


def test_every_registered_command_has_help():
    runner = CliRunner()
    for name in COMMANDS:
        res = runner.invoke(cli, [name, "--help"])
        assert res.exit_code == 0, f"{name}: {res.output}"
        assert "Usage:" in res.output


def test_unknown_command_is_usage_error():
    res = CliRunner().invoke(cli, ["no-such-command"])
    assert res.exit_code == ExitCode.USAGE


def test_exit_codes_are_documented():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | {code.name} |" in doc, f"{code.name} missing from docs/exit-codes.md"


def test_python_dash_m_runs():
    out = subprocess.run([sys.executable, "-m", "trtconv", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Usage:" in out.stdout
