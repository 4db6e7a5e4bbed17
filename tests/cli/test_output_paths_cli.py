"""Every path `build` writes is checked before the first stage (issue 35): a read-only folder, a path
under a regular file, a folder where a file goes. One line naming the flag, a documented exit code,
and nothing written: no engine, manifest, prepared ONNX, report, repository or depfile.

Root is not stopped by permission bits, so a read-only folder here is a read-only tmpfs mounted in a
private mount namespace when running as root (as tests/test_atomic.py does), permission bits
otherwise; a path under a regular file stops everyone."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def _model(folder: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


ROOT = Path(__file__).parents[2]


@pytest.fixture
def read_only_run(tmp_path: Path):
    """``run(folder_name, args)``: ``trtconv args`` (a subprocess of this checkout) with ``tmp_path/folder_name``
    read-only for everyone, root included: a read-only tmpfs mounted over it in a private mount namespace
    (``unshare -m``) when running as root, permission bits otherwise. Each run first proves the folder
    refuses a write (exit 99 if it did not)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRTCONV_RESULT_CACHE_DIR", None)
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o ro,size=64k tmpfs /mnt"],
                               capture_output=True, text=True) if shutil.which("unshare") else None
        if probe is None or probe.returncode:
            pytest.skip("running as root (permission bits do not stop root) and no private read-only mount here: "
                        + (probe.stderr.strip()[:200] if probe else "unshare is not installed"))

    def run(name: str, args: list[object]) -> subprocess.CompletedProcess:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "trtconv", *map(str, args)]
        if os.geteuid() != 0:
            folder.chmod(0o555)
            try:
                if os.access(folder, os.W_OK):
                    return subprocess.CompletedProcess(argv, 99, "", "the folder is still writable")
                return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
            finally:
                folder.chmod(0o755)
        q = shlex.quote(str(folder))
        script = f'mount -t tmpfs -o ro,size=64k tmpfs {q} || exit 98; if touch {q}/probe 2>/dev/null; then exit 99; fi; exec "$@"'
        return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *argv], capture_output=True, text=True,
                              env=env, cwd=tmp_path)

    return run


def _build(tmp_path: Path, *flags: object, trt: str = "rtx"):
    model = _model(tmp_path)
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "m.engine"), "--trt", trt,
                                   *map(str, flags)])
    return res


def _left(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name not in ("m.onnx", "ro", "afile"))


def _refused(res, code: ExitCode, line: str) -> None:
    assert res.exit_code == code, res.output
    errors = [x for x in res.stderr.splitlines() if x.startswith("trtconv: error:")]
    assert errors == [f"trtconv: error: {line}"], res.stderr
    assert ": done" not in res.stderr and "Traceback" not in res.output  # refused before the first stage


def _refused_in_a_subprocess(res: subprocess.CompletedProcess, code: ExitCode, line: str) -> None:
    assert res.returncode == code, (res.returncode, res.stderr)
    errors = [x for x in res.stderr.splitlines() if x.startswith("trtconv: error:")]
    assert errors == [f"trtconv: error: {line}"], res.stderr
    assert ": done" not in res.stderr and "Traceback" not in res.stderr  # refused before the first stage


def test_report_into_a_read_only_folder(tmp_path, read_only_run):
    model, ro = _model(tmp_path), tmp_path / "ro"
    res = read_only_run("ro", ["build", model, "-o", tmp_path / "m.engine", "--trt", "rtx", "--report", ro / "r.html"])
    _refused_in_a_subprocess(res, ExitCode.IO_ERROR, f"--report {ro / 'r.html'}: folder {ro} is not writable")
    assert _left(tmp_path) == []


def test_triton_repo_into_a_read_only_folder(tmp_path, read_only_run):
    # a target Triton serves (TensorRT 10.16): the check comes before TensorRT is needed at all
    model, ro = _model(tmp_path), tmp_path / "ro"
    res = read_only_run("ro", ["build", model, "-o", tmp_path / "m.engine", "--trt", "10.16",
                               "--triton-repo", ro / "models"])
    _refused_in_a_subprocess(res, ExitCode.IO_ERROR, f"--triton-repo {ro / 'models'}: folder {ro} is not writable")
    assert _left(tmp_path) == []


def test_engine_into_a_read_only_folder(tmp_path, read_only_run):
    model, ro = _model(tmp_path), tmp_path / "ro"
    res = read_only_run("ro", ["build", model, "-o", ro / "m.engine", "--trt", "rtx"])
    _refused_in_a_subprocess(res, ExitCode.IO_ERROR, f"-o {ro / 'm.engine'}: folder {ro} is not writable")
    assert _left(tmp_path) == []


@pytest.mark.parametrize("flag", ["--report", "--deps", "--prepared", "--triton-repo"])
def test_a_path_under_a_regular_file(tmp_path, flag):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    res = _build(tmp_path, flag, blocker / "out", trt="10.16" if flag == "--triton-repo" else "rtx")
    _refused(res, ExitCode.IO_ERROR, f"{flag} {blocker / 'out'}: {blocker} is a file, not a folder")
    assert _left(tmp_path) == [] and blocker.read_text() == ""


def test_calibration_cache_under_a_regular_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    calib = tmp_path / "calib"
    calib.mkdir()
    res = _build(tmp_path, "--precision", "int8", "--int8-unverified", "--random-data", "4", "--calib-cache", blocker / "c.cache")
    _refused(res, ExitCode.IO_ERROR, f"--calib-cache {blocker / 'c.cache'}: {blocker} is a file, not a folder")
    assert _left(tmp_path) == ["calib"]


@pytest.mark.parametrize("flag", ["--report", "--deps"])
def test_quantize_refuses_a_report_or_depfile_it_could_not_write_before_the_work(tmp_path, flag):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    out = tmp_path / "q.onnx"
    res = CliRunner().invoke(cli, ["quantize", str(_model(tmp_path)), "--precision", "fp16", "-o", str(out),
                                   flag, str(blocker / "out")])
    _refused(res, ExitCode.IO_ERROR, f"{flag} {blocker / 'out'}: {blocker} is a file, not a folder")
    assert "quantizing" not in res.stderr and _left(tmp_path) == []


def test_a_missing_output_folder_hint_runs_as_printed(tmp_path, monkeypatch):
    """`-o nodir/x.engine`: the hint was "create it first"; now the command that creates it, in backticks,
    and after running it the same build succeeds."""
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    argv = ["build", "m.onnx", "--trt", "rtx", "-o", "new dir/m.engine"]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == ExitCode.IO_ERROR, res.output
    command = res.output.split("hint: ", 1)[1].split("`")[1]
    assert command == "mkdir -p 'new dir'"
    subprocess.run(command, shell=True, check=True)
    assert CliRunner().invoke(cli, argv).exit_code == 0


def test_a_build_never_overwrites_its_input_model(tmp_path):
    """``build m.prepared.onnx -o m.engine`` would write its prepared ONNX over the model (it once did, --force or
    not: the default prepared ONNX is replaced without it); ``-o`` the model itself likewise. Exit 2, the model
    unchanged, and a hint that runs as printed."""
    model = _model(tmp_path).rename(tmp_path / "m.prepared.onnx")
    before = model.read_bytes()
    for args in (["-o", str(tmp_path / "m.engine"), "--precision", "fp16"], ["-o", str(model), "--force"]):
        res = CliRunner().invoke(cli, ["build", str(model), "--trt", "rtx", *args])
        assert res.exit_code == ExitCode.USAGE, res.output
        assert "the input model: the build would overwrite it" in res.stderr, res.stderr
        assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.prepared.onnx"]
        (hint,) = [ln.strip().removeprefix("hint: ") for ln in res.stderr.splitlines() if ln.strip().startswith("hint:")]
        again = CliRunner().invoke(cli, shlex.split(hint)[1:])
        assert again.exit_code == ExitCode.OK, (hint, again.output)
        assert model.read_bytes() == before
        for p in tmp_path.iterdir():
            if p != model:
                p.unlink()


@pytest.mark.parametrize("args", [["check", "{m}", "--report", "{m}"],
                                  ["quantize", "{m}", "-o", "{d}/q.onnx", "--precision", "fp16", "--report", "{m}"],
                                  ["rewrite", "{m}", "-o", "{d}/r.onnx", "--deps", "{m}"]],
                         ids=["check-report", "quantize-report", "rewrite-deps"])
def test_a_report_or_depfile_named_like_the_model_is_refused(tmp_path, args):
    model = _model(tmp_path)
    before = model.read_bytes()
    res = CliRunner().invoke(cli, [a.format(m=model, d=tmp_path) for a in args])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "is the input model: writing it would overwrite the model" in res.stderr, res.stderr
    assert model.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


@pytest.mark.parametrize("args, suggested", [(["quantize", "{m}", "-o", "{m}", "--precision", "fp16"], "m.fp16.onnx"),
                                             (["rewrite", "{m}", "-o", "{m}"], "m.rewritten.onnx")],
                         ids=["quantize", "rewrite"])
@pytest.mark.parametrize("force", [False, True])
def test_an_output_model_named_like_the_input_is_refused_with_a_name_that_runs(tmp_path, args, suggested, force):
    """`-o` the input model: said as such (without --force it said "already exists, pass --force", which led to
    the same refusal), and the hint's name, given to -o, runs."""
    model = _model(tmp_path)
    before = model.read_bytes()
    argv = [a.format(m=model) for a in args] + (["--force"] if force else [])
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "is the input model: writing it would overwrite the model" in res.stderr, res.stderr
    assert f"-o {tmp_path / suggested}" in res.stderr and model.read_bytes() == before
    again = CliRunner().invoke(cli, [str(tmp_path / suggested) if a == str(model) and i == 3 else a
                                     for i, a in enumerate(argv)])
    assert again.exit_code == ExitCode.OK, again.output
    assert model.read_bytes() == before and (tmp_path / suggested).is_file()


def test_triton_repo_with_prepare_only_is_refused_not_skipped(tmp_path):
    """--prepare-only builds no engine, so --triton-repo had nothing to hold and was skipped without a word."""
    model = _model(tmp_path)
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "m.engine"), "--trt", "11.4",
                                   "--prepare-only", "--triton-repo", str(tmp_path / "repo")])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "--triton-repo needs an engine, and --prepare-only builds none" in res.stderr
    (hint,) = [ln.strip().removeprefix("hint: ") for ln in res.stderr.splitlines() if ln.strip().startswith("hint:")]
    argv = shlex.split(hint)
    assert "--prepare-only" not in argv and argv[argv.index("--triton-repo") + 1] == str(tmp_path / "repo"), hint
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_engine_flags_with_prepare_only_are_said_to_do_nothing(tmp_path):
    """--prepare-only builds no engine: --workspace, --opt-level, --layers and the like are said to have no effect
    (a warning: a spec file shared with full builds may set them), never dropped without a word."""
    model = _model(tmp_path)
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "m.engine"), "--trt", "rtx",
                                   "--prepare-only", "--workspace", "1G", "--opt-level", "5", "--layers"])
    assert res.exit_code == ExitCode.OK, res.output
    said = [ln for ln in res.stderr.splitlines() if "no effect" in ln]
    assert said == ["trtconv: warning: --workspace, --opt-level, --layers have no effect with --prepare-only: "
                    "no engine is built"], res.stderr
    quiet = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "m.engine"), "--trt", "rtx",
                                     "--prepare-only", "--force"])
    assert quiet.exit_code == ExitCode.OK and "no effect" not in quiet.stderr
