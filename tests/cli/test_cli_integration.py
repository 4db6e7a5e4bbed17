"""trtconv in shells and CI: JSON alone on stdout, no colour or bars in pipes, the exit-code
taxonomy honoured by every command, shell completion, --version."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from trtconv.cli.main import COMMANDS, cli
from trtconv.errors import ExitCode

ANSI = re.compile(r"\x1b\[")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7]|4[0-7])(;[0-9]+)*m")

# One real invocation per command that has --json ({model}: PP-OCR cls, {tmp}: a scratch folder),
# with the exit code it has on a machine without TensorRT (and with it).
JSON_RUNS: dict[str, tuple[list[str], set[int]]] = {
    "check": (["check", "{model}", "--json"], {0}),
    "rewrite": (["rewrite", "{model}", "-o", "{tmp}/rw.onnx", "--json"], {0}),
    "quantize": (["quantize", "{model}", "--precision", "fp16", "-o", "{tmp}/q.onnx", "--json"], {0}),
    "build": (["build", "{model}", "-o", "{tmp}/m.engine", "--prepare-only", "--shapes", "x:1x3x48x192", "--json"],
              {0}),
    "verify": (["verify", "{tmp}/none.engine", "--onnx", "{model}", "--json"], {int(ExitCode.USAGE)}),
    "bench": (["bench", "{tmp}/none.engine", "--json"], {int(ExitCode.USAGE)}),
    "doctor": (["doctor", "--json"], {0, int(ExitCode.TENSORRT_UNAVAILABLE)}),
    "inspect": (["inspect", "{tmp}/none.engine", "--json"], {int(ExitCode.USAGE)}),
}


def _has_json(name: str) -> bool:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None
    return any(p.name == "as_json" for p in cmd.params)


def _fill(args: list[str], model: Path, tmp: Path) -> list[str]:
    return [a.format(model=model, tmp=tmp) for a in args]


def test_every_json_command_has_a_recipe():
    assert {c for c in COMMANDS if _has_json(c)} <= set(JSON_RUNS), "add the new command to JSON_RUNS"


@pytest.mark.parametrize("name", sorted(JSON_RUNS))
def test_json_alone_on_stdout(name: str, tmp_path: Path, ocr_cls: Path):
    """With --json, stdout is exactly one JSON document (or nothing, on an error before any report)."""
    args, codes = JSON_RUNS[name]
    res = CliRunner().invoke(cli, _fill(args, ocr_cls, tmp_path))
    assert res.exit_code in codes, res.output
    if res.exit_code == 0 or res.stdout.strip():
        doc = json.loads(res.stdout)  # raises if anything else is on stdout
        assert isinstance(doc, dict)
    assert not ANSI.search(res.stdout + res.stderr)
    if res.exit_code:
        assert "trtconv: error:" in res.stderr or res.stdout.strip()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS")}
    env.update(TERM="xterm-256color", COLUMNS="120", **extra)
    return env


def test_pipes_get_plain_text_and_progress_on_stderr(tmp_path: Path, ocr_cls: Path):
    """A pipe is what CI sees: no colour, no bars, no cursor games; results on stdout only."""
    from realdata import ocr_line_images

    ocr_line_images(tmp_path / "lines", range(3))
    out = subprocess.run(
        [sys.executable, "-m", "trtconv", "quantize", str(ocr_cls), "--precision", "fp16", "-o",
         str(tmp_path / "q.onnx"), "--calib-data", str(tmp_path / "lines"), "--preprocess", "preset=ppocr-cls"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert not ANSI.search(out.stdout) and not ANSI.search(out.stderr)
    assert "\r" not in out.stderr  # no redrawn progress bars
    assert "trtconv: measuring activation ranges" in out.stderr  # progress, as lines, on stderr
    assert "wrote " in out.stdout and "trtconv:" not in out.stdout


def _in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run trtconv with stdout and stderr on a pseudo-terminal; return what it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.execvpe(sys.executable, [sys.executable, "-m", "trtconv", *args], env)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode(errors="replace")


def test_no_color_is_respected_on_a_terminal(ocr_cls: Path):
    coloured = _in_terminal(["check", str(ocr_cls)], _env())
    assert COLOUR.search(coloured), "expected colour on a terminal (else this test proves nothing)"
    plain = _in_terminal(["check", str(ocr_cls)], _env(NO_COLOR="1"))
    assert "supported" in plain.lower()
    assert not COLOUR.search(plain), repr(plain[:300])


MODEL_COMMANDS = {
    "check": ["check", "{m}"],
    "rewrite": ["rewrite", "{m}", "-o", "{tmp}/out.onnx"],
    "quantize": ["quantize", "{m}", "--precision", "fp16", "-o", "{tmp}/out.onnx"],
    "build": ["build", "{m}", "-o", "{tmp}/out.engine", "--prepare-only"],
}


@pytest.mark.parametrize("name", sorted(MODEL_COMMANDS))
def test_exit_code_taxonomy_for_bad_models_and_outputs(name: str, tmp_path: Path, ocr_cls: Path):
    runner = CliRunner()

    def run(model: Path, *extra: str):
        args = [a.format(m=model, tmp=tmp_path) for a in MODEL_COMMANDS[name]]
        return runner.invoke(cli, [*args, *extra])

    missing = run(tmp_path / "missing.onnx")
    assert missing.exit_code == ExitCode.USAGE and "no such file" in missing.stderr
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    bad = run(garbage)
    assert bad.exit_code == ExitCode.INVALID_MODEL, bad.output
    for res in (missing, bad):
        assert "Traceback" not in res.output
        assert res.stderr.count("trtconv: error: ") == 1  # one line (plus a hint), after any progress
    if name != "check":  # writers: an existing output is not overwritten without --force
        target = tmp_path / ("out.engine" if name == "build" else "out.onnx")
        target.write_text("keep me")
        if name == "build":  # the engine is an output unless --prepare-only (then it is not written)
            res = runner.invoke(cli, ["build", str(ocr_cls), "-o", str(target), "--shapes", "x:1x3x48x192"])
        else:
            res = run(ocr_cls)
        assert res.exit_code == ExitCode.USAGE and "already exists" in res.stderr, res.output
        assert target.read_text() == "keep me"


def test_unknown_option_is_usage_error():
    res = CliRunner().invoke(cli, ["check", "--no-such-flag", "x.onnx"])
    assert res.exit_code == ExitCode.USAGE


TRTCONV = shutil.which("trtconv")


@pytest.mark.skipif(TRTCONV is None, reason="the trtconv console script is not installed (make install)")
@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o nosort -F"), ("zsh", "compdef"),
                                               ("fish", "complete --no-files --command trtconv")])
def test_shell_completion_script_is_produced(shell: str, marker: str):
    out = subprocess.run([TRTCONV], env={**os.environ, "_TRTCONV_COMPLETE": f"{shell}_source"},
                         capture_output=True, text=True)
    assert out.returncode == 0 and marker in out.stdout, out.stdout[:500]


@pytest.mark.skipif(TRTCONV is None, reason="the trtconv console script is not installed (make install)")
def test_completion_lists_lazy_commands_and_options():
    def complete(words: str) -> list[str]:
        env = {**os.environ, "_TRTCONV_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
        out = subprocess.run([TRTCONV], env=env, capture_output=True, text=True)
        return [line.split(",", 1)[1] for line in out.stdout.splitlines() if "," in line]

    assert set(complete("trtconv ")) >= set(COMMANDS)
    assert "quantize" in complete("trtconv qu")
    assert "--precision" in complete("trtconv quantize --pre")


def test_version_names_trtconv_onnx_onnxruntime_and_tensorrt():
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0
    names = [line.split()[0] for line in res.stdout.splitlines()]
    assert names[0] == "trtconv" and {"onnx", "onnxruntime", "tensorrt"} <= set(names)
    import onnx
    import onnxruntime

    assert f"onnx {onnx.__version__}" in res.stdout and f"onnxruntime {onnxruntime.__version__}" in res.stdout


def _trtconv_lines(node: object) -> list[str]:
    """Every shell command line inside a parsed CI config that runs trtconv."""
    if isinstance(node, dict):
        return [x for v in node.values() for x in _trtconv_lines(v)]
    if isinstance(node, list):
        return [x for v in node for x in _trtconv_lines(v)]
    if isinstance(node, str):
        text = node.replace("\\\n", " ")
        return [line.strip() for line in text.splitlines() if line.strip().startswith("trtconv ")]
    return []


def test_ci_examples_parse_and_use_real_flags():
    """docs/ci.md's GitHub Actions and GitLab CI jobs: valid YAML, check + quantize with a gate, real flags."""
    import shlex

    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "ci.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", doc, flags=re.S | re.M)
    assert len(blocks) >= 2
    jobs = [_trtconv_lines(yaml.safe_load(block)) for block in blocks]
    assert sum({shlex.split(x)[1] for x in lines} >= {"check", "quantize"} for lines in jobs) >= 2
    for lines in jobs:
        for line in lines:
            words = shlex.split(line.split(">")[0])
            cmd = cli.get_command(click.Context(cli), words[1])
            assert cmd is not None, line
            known = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
            unknown = [w for w in words[2:] if w.startswith("-") and w not in known]
            assert not unknown, f"{line}: no such flag {unknown}"
            if words[1] == "quantize":
                assert "--min-cosine" in words and "--json" in words  # the accuracy gate


def test_a_table_in_a_pipe_has_no_trailing_spaces():
    """`trtconv doctor | cat` padded every line of its table to the widest row (one was 150 characters): noise
    in a CI log, and `grep 'none$'` found nothing. In a pipe lines end where their text does; the text is kept."""
    res = subprocess.run([sys.executable, "-m", "trtconv", "doctor"], capture_output=True, text=True)
    assert res.returncode in (0, int(ExitCode.TENSORRT_UNAVAILABLE)), res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("TensorRT ") and any(ln.startswith("onnxruntime") for ln in lines), res.stdout
    assert [ln for ln in lines if ln != ln.rstrip(" ")] == []
    assert all("  " in ln for ln in lines[:3])  # the columns are still aligned by spaces between them
