"""--deps: make-style dependency files, checked by GNU make itself."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from test_config import run

from trtconv.cli.depfile import make_quote, render, write_depfile
from trtconv.errors import ExitCode, UsageError
from trtconv.load import load_model
from trtconv.load.save import _with_raw_data

MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="GNU make not installed")


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def test_make_quote_escapes_what_make_needs():
    assert make_quote("a b") == "a\\ b"
    assert make_quote("cost$1") == "cost$$1"
    assert make_quote("c#1") == "c\\#1"
    assert make_quote("plain/path.onnx") == "plain/path.onnx"
    assert make_quote("tab\there") == "tab\\\there"
    assert make_quote("odd\\ name") == "odd\\\\\\ name"  # a backslash before a space is doubled (gcc)
    with pytest.raises(UsageError, match="newline"):
        make_quote("two\nlines")


def test_render_lists_each_input_once_with_phony_rules():
    text = render(["out.engine"], ["m.onnx", "m.onnx.data", "m.onnx"])
    assert text == "out.engine: \\\n  m.onnx \\\n  m.onnx.data\n\nm.onnx:\n\nm.onnx.data:\n"


def _age(paths: list[Path], seconds: int = 100) -> None:
    for p in paths:
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns - seconds * 10**9, st.st_mtime_ns - seconds * 10**9))


def _up_to_date(folder: Path, target: str) -> bool:
    res = subprocess.run([MAKE, "-q", target], cwd=folder, capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode == 0


@needs_make
def test_make_reads_escaped_paths(tmp_path: Path):
    """Paths with spaces, `$` and `#`: make must see each as one prerequisite that exists."""
    names = ["with space.onnx", "dollar$sign.data", "hash#mark.npy", "sub dir/x.bin"]
    (tmp_path / "sub dir").mkdir()
    deps = [tmp_path / n for n in names]
    for d in deps:
        d.write_bytes(b"x")
    (tmp_path / "Makefile").write_text("out:\n\ttouch out\n-include out.d\n")
    write_depfile(tmp_path / "out.d", ["out"], names)
    (tmp_path / "out").write_text("")
    _age(deps)
    assert _up_to_date(tmp_path, "out")
    for d in deps:
        os.utime(d)  # touch one input: out is stale
        assert not _up_to_date(tmp_path, "out"), d.name
        _age([d])
    assert _up_to_date(tmp_path, "out")
    deps[0].unlink()  # a deleted input means rebuild, not "No rule to make target"
    assert not _up_to_date(tmp_path, "out")


@pytest.fixture
def external_model(tmp_path: Path, ocr_cls: Path) -> Path:
    """The PP-OCR classifier with its weights (held in Constant nodes) in an external-data file."""
    path = tmp_path / "ext.onnx"
    raw = _with_raw_data(onnx.load(ocr_cls))  # onnx externalizes raw_data tensors only
    onnx.save_model(raw, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=1024, convert_attribute=True)
    assert load_model(path).external_files == (path.parent / "ext.onnx.data",)
    assert (tmp_path / "ext.onnx.data").is_file()
    return path


def test_deps_list_model_external_data_calibration_plugins_and_spec(tmp_path, external_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calib = tmp_path / "calib set"
    (calib / "more").mkdir(parents=True)
    for name in ("a.npy", "more/b.npy"):
        (calib / name).write_bytes(b"data")
    (tmp_path / "libplug.so").write_bytes(b"\x7fELF")
    (tmp_path / "spec.toml").write_text('calib-data = "calib set"\nplugin = ["libplug.so"]\n')
    res = run(["ext.onnx", "-o", "out.onnx", "--config", "spec.toml", "--deps", "out.onnx.d"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "out.onnx.d").read_text()
    head = text.split("\n\n")[0]
    assert head.startswith("out.onnx: \\\n")
    listed = [line.strip().rstrip(" \\") for line in head.splitlines()[1:]]
    assert listed == ["ext.onnx", "ext.onnx.data", "calib\\ set", "calib\\ set/a.npy",
                      "calib\\ set/more/b.npy", "libplug.so", "spec.toml"]
    assert "out.onnx" not in listed and "out.onnx.d" not in listed


def test_no_depfile_when_the_command_fails(tmp_path, ocr_cls, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run([str(ocr_cls), "-o", "out.onnx", "--deps", "out.d", "--fail"])
    assert res.exit_code == ExitCode.ACCURACY
    assert not (tmp_path / "out.d").exists()
    res = run(["missing.onnx", "-o", "out.onnx", "--deps", "out.d"])
    assert res.exit_code == ExitCode.USAGE and not (tmp_path / "out.d").exists()
