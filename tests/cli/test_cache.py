"""--cache-dir: content-addressed results; hits, misses, and what must never hit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from test_config import run

from trtconv.cli.cache import cache_key, entry_dir, lookup, store
from trtconv.errors import ExitCode


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


@pytest.fixture
def work(tmp_path: Path, ocr_cls: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cls.onnx").write_bytes(ocr_cls.read_bytes())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def conv(*args: str):
    return run(["cls.onnx", "-o", "out.onnx", "--cache-dir", "cache", "--force", *args])


def entries(cache: Path) -> list[Path]:
    return sorted(p.parent for p in cache.glob("*/*/entry.json"))


def test_miss_then_hit_restores_output_and_replays_stdout(work: Path):
    first = conv("--json")
    assert first.exit_code == 0, first.output
    assert "cache hit" not in first.stderr
    produced = (work / "out.onnx").read_bytes()
    assert len(entries(work / "cache")) == 1
    (work / "out.onnx").unlink()
    second = conv("--json")
    assert second.exit_code == 0, second.output
    assert "trtconv: cache hit" in second.stderr
    assert "progress on stderr" not in second.stderr  # the command did not run again
    assert second.stdout == first.stdout and json.loads(second.stdout)["precision"] == "fp32"
    assert (work / "out.onnx").read_bytes() == produced


def test_settings_and_input_bytes_change_the_key(work: Path):
    assert conv().exit_code == 0
    res = conv("--precision", "fp16")  # other settings: a miss
    assert res.exit_code == 0 and "cache hit" not in res.stderr
    assert conv("--precision", "fp16").stderr.count("cache hit") == 1
    proto = onnx.load(work / "cls.onnx")
    proto.doc_string = "edited"  # same graph, other bytes: a miss (the key hashes contents)
    onnx.save(proto, work / "cls.onnx")
    res = conv()
    assert res.exit_code == 0 and "cache hit" not in res.stderr
    assert len(entries(work / "cache")) == 3


def test_touching_without_changing_is_a_hit(work: Path):
    assert conv().exit_code == 0
    os.utime(work / "cls.onnx")
    assert "cache hit" in conv().stderr


def test_run_only_flags_do_not_change_the_key(work: Path):
    assert conv().exit_code == 0
    assert "cache hit" in run(["cls.onnx", "-o", "out.onnx", "--cache-dir", "cache", "--force",
                               "--deps", "out.d"]).stderr
    assert (work / "out.d").is_file()  # --deps is written on a hit too


def test_failed_runs_are_not_stored(work: Path):
    res = conv("--fail")
    assert res.exit_code == ExitCode.ACCURACY
    assert entries(work / "cache") == []
    assert conv("--fail").exit_code == ExitCode.ACCURACY  # ran again, failed again


def test_hit_respects_force(work: Path):
    assert conv().exit_code == 0
    res = run(["cls.onnx", "-o", "out.onnx", "--cache-dir", "cache"])
    assert res.exit_code == ExitCode.USAGE and "already exists" in res.stderr


def test_side_files_are_cached_with_the_output(work: Path):
    """A manifest written beside the output (as build writes one) comes back with it."""
    assert conv("--manifest").exit_code == 0
    manifest = (work / "out.onnx.json").read_text()
    (work / "out.onnx").unlink()
    (work / "out.onnx.json").unlink()
    assert "cache hit" in conv("--manifest").stderr
    assert (work / "out.onnx").is_file() and (work / "out.onnx.json").read_text() == manifest
    entry = entries(work / "cache")[0]
    assert json.loads((entry / "entry.json").read_text())["files"] == ["out.onnx.json", "out.onnx"]


def test_unusable_cache_dir_warns_and_still_works(work: Path):
    (work / "blocker").write_text("a file, not a folder")
    res = run(["cls.onnx", "-o", "out.onnx", "--cache-dir", "blocker/cache"])
    assert res.exit_code == 0 and "running without the cache" in res.stderr
    assert (work / "out.onnx").is_file()


def test_store_is_first_writer_wins_and_damage_is_a_miss(tmp_path: Path):
    out = tmp_path / "o.bin"
    out.write_bytes(b"engine bytes")
    key = cache_key("build", {"precision": "fp16"}, [out])
    assert store(tmp_path / "c", key, [out], tmp_path, "stdout\n") is not None
    assert store(tmp_path / "c", key, [out], tmp_path, "other\n") is None  # a parallel job lost the race
    entry = lookup(tmp_path / "c", key)
    assert entry is not None and entry.stdout == "stdout\n" and entry.files == ("o.bin",)
    (entry_dir(tmp_path / "c", key) / "files" / "o.bin").unlink()
    assert lookup(tmp_path / "c", key) is None
    assert not list((tmp_path / "c").glob(".trtconv-tmp-*"))  # no scratch left behind


def test_key_is_stable_and_content_addressed(tmp_path: Path):
    a = tmp_path / "a.onnx"
    a.write_bytes(b"1")
    k1 = cache_key("quantize", {"x": 1, "y": [1, 2]}, [a])
    k2 = cache_key("quantize", {"y": [1, 2], "x": 1}, [a])
    assert k1.digest == k2.digest
    assert k1.material["trtconv"] and "onnxruntime" in k1.material["versions"]
    a.write_bytes(b"2")
    assert cache_key("quantize", {"x": 1, "y": [1, 2]}, [a]).digest != k1.digest
    assert cache_key("rewrite", {"x": 1, "y": [1, 2]}, [a]).digest != k1.digest


def test_environment_variable_turns_the_cache_on(work: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRTCONV_RESULT_CACHE_DIR", str(work / "envcache"))
    args = ["cls.onnx", "-o", "out.onnx", "--force"]
    assert run(args).exit_code == 0
    assert "cache hit" in run(args).stderr
    assert entries(work / "envcache")
    monkeypatch.setenv("TRTCONV_CACHE_DIR", str(work / "timing"))  # the timing-cache folder is another thing
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR")
    assert "cache hit" not in run(args).stderr
