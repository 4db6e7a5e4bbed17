"""Build spec files: precedence (flag > spec > default), validation errors, --print-config.

The machinery is exercised here on ``conv``, a small real command built from the same
decorators the product commands use (it copies a model with trtconv's own loader and
saver), so these tests stay fast; tests/cli/test_cli_integration.py runs the product commands.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from trtconv.cli.cache import cache_option
from trtconv.cli.config import config_option, spec_keys, tomllib
from trtconv.cli.depfile import deps_option
from trtconv.cli.main import LazyGroup
from trtconv.cli.options import force_option, json_option, model_argument, output_option, shapes_option
from trtconv.cli.output import print_json
from trtconv.errors import ExitCode
from trtconv.load import load_model, save_model
from trtconv.outputs import write_json


@click.group(cls=LazyGroup)
def harness_cli() -> None:
    """A group with trtconv's error policy, holding the test command."""


@harness_cli.command("conv")
@model_argument
@output_option()
@force_option
@json_option
@shapes_option
@click.option("--precision", type=click.Choice(["fp32", "fp16"]), default="fp32")
@click.option("--calib-data", type=click.Path(path_type=Path, exists=True))
@click.option("--plugin", "plugins", multiple=True, type=click.Path(path_type=Path))
@click.option("--max-abs", type=float)
@click.option("--workspace", type=int, default=1024)
@click.option("--verify/--no-verify", default=True)
@click.option("--fail", is_flag=True, help="exit 7 after writing (to test that failures are not cached)")
@click.option("--manifest", is_flag=True, help="also write OUTPUT.json beside the output, as build does")
@config_option
@deps_option()
@cache_option()
def conv(model, output, force, as_json, shapes, precision, calib_data, plugins, max_abs, workspace, verify, fail,
         manifest):
    """Copy MODEL to OUTPUT through trtconv's loader and saver; report the settings."""
    from trtconv.cli.output import finish

    save_model(load_model(model).proto, output, force=force)
    click.echo("converting (progress on stderr)", err=True)
    report = {"model": str(model), "output": str(output), "precision": precision, "workspace": workspace}
    if manifest:
        write_json(Path(f"{output}.json"), report, force=True)
    if as_json:
        print_json(report)
    else:
        click.echo(f"wrote {output} ({precision})")
    if fail:
        finish(ExitCode.ACCURACY)


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def run(args: list[str], **kw):
    return CliRunner().invoke(harness_cli, ["conv", *args], **kw)


@pytest.fixture
def work(tmp_path: Path, ocr_cls: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import shutil

    shutil.copyfile(ocr_cls, tmp_path / "cls.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def effective(args: list[str]) -> dict:
    res = run([*args, "--print-config", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_precedence_flag_over_spec_over_default(work: Path):
    (work / "spec.toml").write_text('model = "cls.onnx"\nprecision = "fp16"\nworkspace = 2048\n')
    out = effective(["--config", "spec.toml", "-o", "o.onnx", "--workspace", "512"])
    s, src = out["settings"], out["sources"]
    assert s["precision"] == "fp16" and src["precision"] == "spec file spec.toml"  # spec over default
    assert s["workspace"] == 512 and src["workspace"] == "command line"  # flag over spec
    assert s["max-abs"] is None and src["max-abs"] == "default"
    assert s["model"] == "cls.onnx" and src["model"] == "spec file spec.toml"  # arguments too
    # and the command really runs with those values
    res = run(["--config", "spec.toml", "-o", "o.onnx", "--workspace", "512", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"model": "cls.onnx", "output": "o.onnx", "precision": "fp16",
                                      "workspace": 512}


def test_spec_covers_every_kind_of_setting(work: Path):
    (work / "calib").mkdir()
    (work / "sub").mkdir()
    (work / "sub" / "spec.toml").write_text(
        'model = "../cls.onnx"\noutput = "../o.onnx"\nshapes = { x = [1, 3, 48, 192] }\n'
        'calib-data = "../calib"\nplugin = ["libdcn.so", "/abs/libx.so"]\nmax_abs = 1\nverify = false\n'
    )
    s = effective(["--config", "sub/spec.toml"])["settings"]
    assert s["shapes"] == "x:1x3x48x192"
    assert s["max-abs"] == 1.0 and s["verify"] is False
    # relative paths are relative to the spec file's folder
    assert s["model"] == "cls.onnx" and s["calib-data"] == "calib"  # "sub/../calib", normalized
    assert s["plugin"] == ["sub/libdcn.so", "/abs/libx.so"]


def test_print_config_toml_round_trips(work: Path):
    (work / "spec.toml").write_text('model = "cls.onnx"\nprecision = "fp16"\nmax-abs = 0.5\n')
    res = run(["--config", "spec.toml", "-o", "o.onnx", "--print-config"])
    assert res.exit_code == 0, res.output
    assert not (work / "o.onnx").exists()  # printing the config does no work
    text = res.stdout
    assert re.search(r'^precision +(= "fp16") +# spec file spec.toml$', text, re.M), text
    parsed = tomllib.loads(text)
    assert parsed["precision"] == "fp16" and parsed["max-abs"] == 0.5 and parsed["output"] == "o.onnx"
    (work / "again.toml").write_text(text)
    again = effective(["--config", "again.toml"])["settings"]
    first = effective(["--config", "spec.toml", "-o", "o.onnx"])["settings"]
    assert again == first


@pytest.mark.parametrize(
    ("spec", "message", "hint"),
    [
        ('precison = "fp16"', "unknown key 'precison'", "did you mean 'precision'?"),
        ("plugins = []", "unknown key 'plugins'", "did you mean 'plugin'?"),
        ('frobnicate = "x"', "unknown key 'frobnicate'", "--help"),
        ('precision = "fp64"', "precision: 'fp64' is not one of 'fp32', 'fp16'", None),
        ("precision = 16", "precision must be a string, got 16", "--precision"),
        ('workspace = "big"', "workspace must be an integer, got \"big\"", None),
        ("workspace = true", "workspace must be an integer, got true", None),
        ('verify = "yes"', "verify must be a boolean", None),
        ('max-abs = "0.1"', "max-abs must be a number", None),
        ('precision = ["fp16"]', "precision takes one value, got a list", None),
        ("shapes = { x = [1, 0] }", "shapes.x must be a list of positive integers", None),
        ('workspace = 1\nworkspace = 2', "not valid TOML", "strings need quotes"),
        ('precision = "fp16"\n[verify]\nmax-abs = 1', "verify must be a value, not a table", None),
        ('max-abs = 1\nmax_abs = 2', "set the same flag --max-abs", None),
        ('config = "other.toml"', "unknown key 'config'", None),
        ('[build]\nprecision = "fp16"', "[build] is a section; a spec file is flat", "delete the line [build]"),
    ],
)
def test_bad_spec_is_usage_error_naming_the_key(work: Path, spec: str, message: str, hint: str | None):
    (work / "bad.toml").write_text(spec + "\n")
    res = run(["--config", "bad.toml", "cls.onnx", "-o", "o.onnx"])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "trtconv: error: spec file bad.toml" in res.stderr
    assert message in res.stderr
    if hint:
        assert hint in res.stderr
    assert "Traceback" not in res.output
    assert not (work / "o.onnx").exists()


def test_missing_and_non_utf8_spec(work: Path):
    res = run(["--config", "nope.toml", "cls.onnx", "-o", "o.onnx"])
    assert res.exit_code == ExitCode.USAGE and "spec file nope.toml: no such file" in res.stderr
    (work / "latin1.toml").write_bytes('model = "mod\xe8le.onnx"\n'.encode("latin-1"))
    res = run(["--config", "latin1.toml", "-o", "o.onnx"])
    assert res.exit_code == ExitCode.USAGE and "not UTF-8" in res.stderr


def test_missing_model_still_reported_with_a_spec(work: Path):
    (work / "spec.toml").write_text('precision = "fp16"\n')
    res = run(["--config", "spec.toml", "-o", "o.onnx"])
    assert res.exit_code == ExitCode.USAGE
    assert "Missing argument 'MODEL'" in res.stderr


def test_spec_keys_are_long_flag_names():
    keys = spec_keys(conv)
    assert {"model", "output", "json", "max-abs", "calib-data", "plugin", "verify", "deps", "cache-dir"} <= set(keys)
    assert "config" not in keys and "print-config" not in keys and "help" not in keys


def test_python_310_gets_tomli():
    """requires-python stays 3.10 (JetPack 6's Python): tomllib's twin comes from PyPI there."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    deps = pyproject["project"]["dependencies"]
    assert pyproject["project"]["requires-python"] == ">=3.10"
    assert any(d.replace(" ", "").startswith("tomli>=") and "python_version<'3.11'" in d.replace(" ", "")
               .replace('"', "'") for d in deps), deps
    assert sys.version_info >= (3, 10)
