"""Every path `build` writes is checked before the first stage (issue 35): a read-only folder, a path
under a regular file, a folder where a file goes. One line naming the flag, a documented exit code,
and nothing written: no engine, manifest, prepared ONNX, report, repository or depfile.

Root is not stopped by permission bits, so a read-only folder here is a read-only mount when
running as root (a tmpfs mounted ``ro``), permission bits otherwise; a path under a regular file
stops everyone."""

from __future__ import annotations

import os
import shutil
import subprocess
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


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A folder no one may write into, root included (proven by trying)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = False
    if os.geteuid() == 0:
        mount = shutil.which("mount")
        mounted = bool(mount) and subprocess.run([mount, "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                                                 capture_output=True).returncode == 0
        if not mounted:
            pytest.skip("running as root (permission bits do not stop root) and no read-only mount can be made here")
    else:
        folder.chmod(0o555)
    try:
        with pytest.raises(OSError):
            (folder / "probe").write_text("")
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)
        else:
            folder.chmod(0o755)


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


def test_report_into_a_read_only_folder(tmp_path, read_only_dir):
    res = _build(tmp_path, "--report", read_only_dir / "r.html")
    _refused(res, ExitCode.IO_ERROR, f"--report {read_only_dir / 'r.html'}: folder {read_only_dir} is not writable")
    assert _left(tmp_path) == []


def test_triton_repo_into_a_read_only_folder(tmp_path, read_only_dir):
    # a target Triton serves (TensorRT 10.16): the check comes before TensorRT is needed at all
    res = _build(tmp_path, "--triton-repo", read_only_dir / "models", trt="10.16")
    _refused(res, ExitCode.IO_ERROR, f"--triton-repo {read_only_dir / 'models'}: folder {read_only_dir} is not writable")
    assert _left(tmp_path) == []


def test_engine_into_a_read_only_folder(tmp_path, read_only_dir):
    model = _model(tmp_path)
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(read_only_dir / "m.engine"), "--trt", "rtx"])
    _refused(res, ExitCode.IO_ERROR, f"-o {read_only_dir / 'm.engine'}: folder {read_only_dir} is not writable")
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
    res = _build(tmp_path, "--precision", "int8", "--random-data", "4", "--calib-cache", blocker / "c.cache")
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
