"""Atomic outputs for real: kill -9 and Ctrl-C mid-write, read-only and full folders.

Nothing here is simulated inside our own code: writers run in subprocesses that are
killed while their temp file exists; read-only and full folders are real mounts in a
private mount namespace (``unshare -m``), skipped with the reason where that is not
permitted; a full disk is also reproduced with RLIMIT_FSIZE (EFBIG).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from interrupts import interrupt_before_rename
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode, UsageError
from trtconv.load import load_model, save_model
from trtconv.outputs import TMP_PREFIX, sweep_stale_temps, write_bytes

BIG_ELEMENTS = 48 * 2**20  # 192 MB of float32: a write that takes long enough to be hit


def _model(value: float, n: int = 4096) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((n,), value, np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(TMP_PREFIX))


WRITER = """
import sys, numpy as np
from pathlib import Path
from onnx import TensorProto, helper, numpy_helper
from trtconv.load import save_model
from trtconv.outputs import write_bytes
kind, out = sys.argv[1], Path(sys.argv[2])
n = int(sys.argv[3])
if kind == "bytes":
    write_bytes(out, b"N" * (n * 4), force=True)
else:
    w = numpy_helper.from_array(np.full((n,), 7.0, np.float32), "W")
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    save_model(m, out, force=True, external_data=(kind == "external"))
print("done", flush=True)
"""


def _kill_when_temp_appears(cmd: list[str], folder: Path, sig: int, delay: float,
                            env: dict | None = None) -> subprocess.CompletedProcess:
    """Start ``cmd``, wait until a trtconv temp appears in ``folder``, sleep ``delay``, send ``sig``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not _temps(folder):
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            pytest.fail(f"writer ended before a temp file appeared (rc {proc.returncode}): {err[-2000:]}")
        time.sleep(0.0005)
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("kind", ["inline", "external", "bytes"])
@pytest.mark.parametrize("delay", [0.0, 0.1])
def test_kill9_mid_write_leaves_old_file_or_new_whole(tmp_path, kind, delay):
    out = tmp_path / ("out.bin" if kind == "bytes" else "out.onnx")
    if kind == "bytes":
        write_bytes(out, b"old")
    else:
        save_model(_model(1.0), out, external_data=(kind == "external"))
    old = {p.name: _sha(p) for p in tmp_path.iterdir()}
    res = _kill_when_temp_appears([sys.executable, "-c", WRITER, kind, str(out), str(BIG_ELEMENTS)],
                                  tmp_path, signal.SIGKILL, delay)
    assert res.returncode == -signal.SIGKILL, "the writer finished before the kill; the test hit nothing"
    finals = [p.name for p in tmp_path.iterdir() if not p.name.startswith(TMP_PREFIX)]
    if out.exists() and _sha(out) == old[out.name]:
        state = "old"
    elif kind == "bytes":
        assert out.read_bytes() == b"N" * (BIG_ELEMENTS * 4), "a partial output is visible"
        state = "new"
    elif out.exists():
        arr = numpy_helper.to_array(load_model(out).proto.graph.initializer[0])
        assert arr.shape == (BIG_ELEMENTS,) and float(arr[-1]) == 7.0, "a partial or mismatched model is visible"
        state = "new"
    else:
        state = "none"  # external data: the old model is removed just before the two renames
        assert kind == "external"
    if kind == "external" and state == "old":
        assert _sha(tmp_path / "out.onnx.data") == old["out.onnx.data"], "old model with new data"
    assert set(finals) <= {"out.onnx", "out.onnx.data", "out.bin"}
    # The killed writer's temp is swept by the next write into the folder.
    if delay == 0.0:
        assert _temps(tmp_path), "killed right after its temp appeared, the writer must have left it"
    write_bytes(tmp_path / "next.json", b"{}")
    assert _temps(tmp_path) == []


def test_sweep_leaves_live_and_foreign_temps_alone(tmp_path):
    live = tmp_path / f"{TMP_PREFIX}ffffff-{os.getpid()}-x"  # another host's tag
    live.write_text("other host")
    from trtconv.outputs import _tmp_prefix

    own = tmp_path / (_tmp_prefix("y") + "tmp")
    own.write_text("this process, alive")
    unrelated = tmp_path / f"{TMP_PREFIX}cache-dir"
    unrelated.mkdir()
    assert sweep_stale_temps(tmp_path) == []
    assert live.exists() and own.exists() and unrelated.exists()


@pytest.fixture(scope="module")
def big_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.onnx"
    save_model(_model(3.0, n=BIG_ELEMENTS // 6), path)  # 32 MB: enough to be caught mid-write
    return path


@pytest.mark.parametrize("command", ["rewrite", "quantize"])
def test_ctrl_c_mid_write_exits_130_and_leaves_nothing(tmp_path, big_model, command):
    """Ctrl-C with the output's temp file written in full and not yet renamed (delivered at that
    point, not after a guessed delay): exit 130 and an empty folder, under any load."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "o.onnx"
    args = {"rewrite": ["--no-verify", "--no-fold"], "quantize": ["--precision", "fp16"]}[command]
    res = interrupt_before_rename([command, str(big_model), "-o", str(out), *args], out_dir, signal.SIGINT)
    assert "signal before rename of " + TMP_PREFIX in res.stderr, res.stderr[-2000:]
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr[-2000:]
    assert "interrupted" in res.stderr and "Traceback" not in res.stderr
    assert list(out_dir.iterdir()) == []


def test_interrupt_the_moment_the_temp_exists_leaves_nothing(tmp_path):
    """The window a signal can hit (it once failed the SIGTERM test): the temp file exists and
    the code that would remove it has not started. The interrupt is raised from inside the
    standard library's mkstemp/mkdtemp, right after it created our temp, as a signal landing then
    would; the CLI must still exit 130 and leave the folder empty."""
    model = save_model(_model(1.0), tmp_path / "m.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = f"""
import sys, tempfile
from pathlib import Path
def interrupted(real, name_of):
    def make(*args, **kwargs):
        made = real(*args, **kwargs)
        if Path(kwargs.get("dir", ".")) == Path({str(out_dir)!r}):
            print("temp created:", Path(name_of(made)).name, file=sys.stderr)
            raise KeyboardInterrupt
        return made
    return make
tempfile.mkstemp = interrupted(tempfile.mkstemp, lambda made: made[1])
tempfile.mkdtemp = interrupted(tempfile.mkdtemp, lambda made: made)
from trtconv.cli.main import main
sys.argv = ["trtconv", "quantize", {str(model)!r}, "--precision", "fp16", "-o", {str(out_dir / "o.onnx")!r}]
main()
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "temp created: " + TMP_PREFIX in res.stderr, res.stderr[-2000:]
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr[-2000:]
    assert list(out_dir.iterdir()) == []


def test_no_overwrite_without_force(tmp_path, ocr_cls):
    out = tmp_path / "o.onnx"
    out.write_bytes(b"precious")
    for args in (["rewrite", str(ocr_cls), "-o", str(out), "--no-verify"],
                 ["quantize", str(ocr_cls), "--precision", "fp16", "-o", str(out)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == ExitCode.USAGE, res.output
        assert "--force" in res.stderr
        assert out.read_bytes() == b"precious"
    res = CliRunner().invoke(cli, ["rewrite", str(ocr_cls), "-o", str(out), "--no-verify", "--force"])
    assert res.exit_code == 0, res.output
    load_model(out)
    assert _temps(tmp_path) == []


def _unshare_ok() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)
    if probe.returncode:
        return f"cannot mount in a private namespace here: {probe.stderr.strip()[:200]}"
    return None


def _in_namespace(setup: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``trtconv args`` after ``setup`` in a private mount namespace, then list the folder."""
    quoted = " ".join(f"'{a}'" for a in args)
    script = f"set -e; {setup}; set +e; {sys.executable} -m trtconv {quoted}; rc=$?; echo LIST; ls -A out; exit $rc"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=cwd)


def test_read_only_output_folder(tmp_path, ocr_cls):
    reason = _unshare_ok()
    if reason:
        pytest.skip(reason)
    (tmp_path / "out").mkdir()
    for args in (["rewrite", str(ocr_cls), "-o", "out/o.onnx", "--no-verify"],
                 ["quantize", str(ocr_cls), "--precision", "fp16", "-o", "out/o.onnx"]):
        res = _in_namespace("mount --bind out out && mount -o remount,bind,ro out", args, tmp_path)
        assert res.returncode == ExitCode.IO_ERROR, res.stderr
        assert "not writable" in res.stderr and "Traceback" not in res.stderr
        assert res.stdout.split("LIST", 1)[1].split() == []


def test_full_output_folder(tmp_path, ocr_det):
    reason = _unshare_ok()
    if reason:
        pytest.skip(reason)
    (tmp_path / "out").mkdir()
    for args in (["rewrite", str(ocr_det), "-o", "out/o.onnx", "--no-verify", "--no-fold"],
                 ["quantize", str(ocr_det), "--precision", "fp16", "-o", "out/o.onnx"]):
        res = _in_namespace("mount -t tmpfs -o size=1m tmpfs out", args, tmp_path)
        assert res.returncode == ExitCode.IO_ERROR, res.stderr
        assert "no space left" in res.stderr and "Traceback" not in res.stderr
        assert res.stdout.split("LIST", 1)[1].split() == [], "temp or partial file left on the full disk"


def _fsize_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


@pytest.mark.parametrize("command", ["rewrite", "quantize"])
def test_file_size_limit_is_a_clear_io_error(tmp_path, ocr_det, command):
    out = tmp_path / "o.onnx"
    args = {"rewrite": ["--no-verify", "--no-fold"], "quantize": ["--precision", "fp16"]}[command]
    res = subprocess.run([sys.executable, "-m", "trtconv", command, str(ocr_det), "-o", str(out), *args],
                         capture_output=True, text=True, preexec_fn=_fsize_limit)
    assert res.returncode == ExitCode.IO_ERROR, res.stderr[-3000:]
    assert "file too large" in res.stderr and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_external_data_file_is_not_overwritten_without_force(tmp_path):
    (tmp_path / "o.onnx.data").write_bytes(b"someone else's weights")
    with pytest.raises(UsageError, match=r"o\.onnx\.data already exists"):
        save_model(_model(1.0), tmp_path / "o.onnx", external_data=True)
    assert (tmp_path / "o.onnx.data").read_bytes() == b"someone else's weights"
    assert not (tmp_path / "o.onnx").exists()
    save_model(_model(1.0), tmp_path / "o.onnx", external_data=True, force=True)
    assert load_model(tmp_path / "o.onnx").proto.graph.initializer[0].dims == [4096]


def test_streamed_external_save_round_trips_every_tensor_kind(tmp_path):
    """save_model streams initializers to the .data file without copying the model; what
    it cannot stream (Constant attributes, strings, small tensors) stays inline."""
    rng = np.random.default_rng(0)
    big = numpy_helper.from_array(rng.random((64, 64), dtype=np.float32), "big_raw")
    typed = helper.make_tensor("big_typed", TensorProto.FLOAT, [32, 32], rng.random(1024).astype(np.float32).tolist())
    small = numpy_helper.from_array(np.array([1, 2], np.int64), "small")
    strings = helper.make_tensor("names", TensorProto.STRING, [2], [b"a", b"b"])
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(rng.random((16, 16), dtype=np.float32)))
    g = helper.make_graph(
        [const, helper.make_node("MatMul", ["x", "big_raw"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [big, typed, small, strings],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    save_model(model, tmp_path / "s.onnx", external_data=True)
    assert model.SerializeToString() == before, "the caller's proto was modified"
    loaded = load_model(tmp_path / "s.onnx")
    assert sorted(r.tensor for r in loaded.external_refs) == ["big_raw", "big_typed"]
    for want, got in zip(model.graph.initializer, loaded.proto.graph.initializer):
        assert want.name == got.name
        np.testing.assert_array_equal(numpy_helper.to_array(want), numpy_helper.to_array(got))
    assert loaded.proto.graph.node[0] == model.graph.node[0]


def test_unwritable_folder_via_access_check(tmp_path, ocr_cls, monkeypatch):
    """Where no read-only mount can be made (no unshare), the same refusal via os.access:
    it is what check_output_path asks before any work starts."""
    import errno

    from trtconv.outputs import os_error

    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == out_dir else real_access(p, mode, **kw))
    res = CliRunner().invoke(cli, ["rewrite", str(ocr_cls), "-o", str(out_dir / "o.onnx"), "--no-verify"])
    assert res.exit_code == ExitCode.IO_ERROR and "not writable" in res.stderr
    for code, words in ((errno.EROFS, "Read-only"), (errno.ENOSPC, "no space left"), (errno.EFBIG, "file too large"),
                        (errno.EDQUOT, "no space left")):
        err = os_error(out_dir / "o.onnx", OSError(code, os.strerror(code)))
        assert err.exit_code == ExitCode.IO_ERROR and words in err.message


def test_ctrl_c_writes_no_report_page_either(tmp_path):
    """--report is written when a command fails, but a Ctrl-C leaves nothing behind, the page included
    (it once said "succeeded (exit 0): restored from the cache" for an interrupted build)."""
    model = save_model(_model(1.0), tmp_path / "m.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    pages = tmp_path / "pages"  # not the watched folder: only the model's rename is interrupted
    pages.mkdir()
    res = interrupt_before_rename(["quantize", str(model), "-o", str(out_dir / "q.onnx"), "--precision", "fp16",
                                   "--report", str(pages / "q.html")], out_dir, signal.SIGINT)
    assert "signal before rename of " + TMP_PREFIX in res.stderr, res.stderr[-2000:]
    assert res.returncode == ExitCode.INTERRUPTED, res.stderr[-2000:]
    assert "report written" not in res.stderr and list(out_dir.iterdir()) == [] and list(pages.iterdir()) == []
