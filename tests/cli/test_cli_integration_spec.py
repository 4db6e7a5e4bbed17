"""--config, --deps and --cache-dir on the product commands (build, quantize, rewrite), and docs/config.md."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from trtconv.cli.config import spec_defaults, spec_keys, toml_type, tomllib
from trtconv.cli.main import cli
from trtconv.errors import ExitCode

SPEC_COMMANDS = ("build", "quantize", "rewrite")
DOC = Path(__file__).parents[2] / "docs" / "config.md"


def command(name: str) -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None
    return cmd


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


@pytest.fixture
def work(tmp_path: Path, ocr_cls: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copyfile(ocr_cls, tmp_path / "cls.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("name", SPEC_COMMANDS)
def test_commands_take_config_deps_and_cache_dir(name: str):
    opts = {o for p in command(name).params for o in p.opts}
    assert {"--config", "--print-config", "--deps", "--cache-dir"} <= opts


def test_build_spec_precedence_and_prepare_only_run(work: Path):
    (work / "conf").mkdir()
    (work / "conf" / "build.toml").write_text(
        'model = "../cls.onnx"\noutput = "../out/cls.engine"\nprecision = "fp16"\n'
        'shapes = { x = [1, 3, 48, 192] }\nprepare-only = true\nopt-level = 2\n'
    )
    (work / "out").mkdir()
    res = invoke("build", "--config", "conf/build.toml", "--opt-level", "4", "--print-config", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["settings"]["opt-level"] == 4 and doc["sources"]["opt-level"] == "command line"
    assert doc["settings"]["precision"] == "fp16" and doc["sources"]["precision"] == "spec file conf/build.toml"
    assert doc["sources"]["workspace"] == "default"
    assert not (work / "out" / "cls.prepared.onnx").exists()
    res = invoke("build", "--config", "conf/build.toml", "--deps", "out/cls.d", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["stopped"] == "prepare-only"
    assert (work / "out" / "cls.prepared.onnx").is_file()
    deps = (work / "out" / "cls.d").read_text()
    assert deps.startswith("out/cls.prepared.onnx:")  # prepare-only: the prepared ONNX is the target
    assert "\n  cls.onnx" in deps and "conf/build.toml" in deps


def test_build_spec_errors_name_the_key(work: Path):
    (work / "bad.toml").write_text('precision = "fp64"\n')
    res = invoke("build", "cls.onnx", "-o", "x.engine", "--config", "bad.toml")
    assert res.exit_code == ExitCode.USAGE
    assert "spec file bad.toml: precision: 'fp64' is not one of 'fp32', 'fp16', 'int8'" in res.stderr
    (work / "bad.toml").write_text("no-verfy = true\n")
    res = invoke("build", "cls.onnx", "-o", "x.engine", "--config", "bad.toml")
    assert res.exit_code == ExitCode.USAGE and "did you mean 'no-verify'?" in res.stderr


def test_quantize_cache_hit_replays_json(work: Path):
    args = ["quantize", "cls.onnx", "--precision", "fp16", "-o", "q.onnx", "--force", "--json",
            "--cache-dir", "cache"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    (work / "q.onnx").unlink()
    second = invoke(*args)
    assert second.exit_code == 0 and "trtconv: cache hit" in second.stderr
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert (work / "q.onnx").is_file()
    third = invoke(*args, "--no-fold-batchnorm")  # another setting: another key
    assert third.exit_code == 0 and "cache hit" not in third.stderr


def test_rewrite_deps_and_cache(work: Path):
    args = ["rewrite", "cls.onnx", "-o", "rw.onnx", "--force", "--deps", "rw.onnx.d", "--cache-dir", "cache"]
    assert invoke(*args).exit_code == 0
    assert (work / "rw.onnx.d").read_text().startswith("rw.onnx: \\\n  cls.onnx\n")
    res = invoke(*args)
    assert res.exit_code == 0 and "cache hit" in res.stderr


def _doc_tables() -> dict[str, dict[str, str]]:
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        m = re.match(r"^### `trtconv (\w+)`", line)
        if m:
            current = tables.setdefault(m.group(1), {})
        m = re.match(r"^\| `([a-z0-9-]+)` \| (.+?) \| ", line)
        if m and current is not None:
            current[m.group(1)] = m.group(2)
    return tables


def test_config_doc_lists_every_key_with_its_type():
    tables = _doc_tables()
    assert set(tables) == set(SPEC_COMMANDS)
    for name in SPEC_COMMANDS:
        keys = spec_keys(command(name))
        assert tables[name] == {k: toml_type(p) for k, p in keys.items()}, f"docs/config.md: trtconv {name}"


def test_config_doc_example_is_a_valid_build_spec(tmp_path: Path):
    block = re.search(r"^```toml\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)
    assert block
    cmd = command("build")
    defaults = spec_defaults(tmp_path / "trtconv.toml", tomllib.loads(block.group(1)), cmd,
                             click.Context(cmd))
    assert defaults["precision"] == "fp16" and defaults["trt"] == "10.16"


def test_build_prepare_only_cache_keeps_builds_overwrite_rules(work: Path):
    """The default prepared ONNX is rewritten freely by build; a cache hit must not demand --force for it."""
    args = ["build", "cls.onnx", "-o", "cls.engine", "--prepare-only", "--shapes", "x:1x3x48x192",
            "--cache-dir", "cache", "--json"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    second = invoke(*args)
    assert second.exit_code == 0 and "cache hit" in second.stderr, second.output
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert (work / "cls.prepared.onnx").is_file() and not (work / "cls.engine").exists()
