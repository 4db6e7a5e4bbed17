"""Engine identity: one hash over ONNX, settings, TensorRT, plugin libraries and target; the result
cache keys on it and refuses a stored engine whose identity does not hold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from realmodels import rapidocr_model

from trtconv.api import BuildSettings
from trtconv.cli.main import cli
from trtconv.pipeline import request_identity
from trtconv.plan import identity, identity_hash, identity_problems, plugin_fingerprints


def _plugin(path: Path, payload: bytes) -> Path:
    path.write_bytes(b"\x7fELF" + payload)  # a plugin library's bytes: the identity hashes the file
    return path


def _ident(model: Path, out: Path, **kw: object) -> str:
    settings = BuildSettings(**kw)  # type: ignore[arg-type]
    target = str(settings.trt)
    return identity_hash(request_identity(model, settings, target, settings.plan(model, out, target)))


def test_a_changed_plugin_library_or_setting_changes_the_identity(tmp_path):
    model = rapidocr_model("cls")
    lib = _plugin(tmp_path / "libplug.so", b"v1")
    base = _ident(model, tmp_path / "m.engine", plugins=(lib,), trt="11.4")
    assert base == _ident(model, tmp_path / "elsewhere.engine", plugins=(lib,), trt="11.4")  # output path: same
    (tmp_path / "copy").mkdir()
    moved = _plugin(tmp_path / "copy" / "libplug.so", b"v1")
    assert base == _ident(model, tmp_path / "m.engine", plugins=(moved,), trt="11.4")  # same bytes elsewhere
    _plugin(lib, b"v2")
    assert base != _ident(model, tmp_path / "m.engine", plugins=(lib,), trt="11.4")
    _plugin(lib, b"v1")
    assert base != _ident(model, tmp_path / "m.engine", plugins=(lib,), trt="11.4", opt_level=2)
    assert base != _ident(model, tmp_path / "m.engine", plugins=(lib,), trt="10.16")


def test_identity_problems_names_a_plugin_library_that_changed_on_disk(tmp_path):
    lib = _plugin(tmp_path / "libplug.so", b"v1")
    details = plugin_fingerprints([lib], {str(lib): ["MyPlugin/1/"]})
    assert details[0]["creators"] == ["MyPlugin/1/"]
    material = {"onnx_sha256": "x", "plugins": [{"file": lib.name, "sha256": details[0]["sha256"]}]}
    manifest = {"identity": identity(material), "plugins": {"details": details}}
    assert identity_problems(manifest) == []
    _plugin(lib, b"v2")
    (problem,) = identity_problems(manifest)
    assert f"plugin library {lib} changed since the build" in problem
    assert identity_problems(manifest, expected_hash="0" * 64)[-1].startswith("its identity")


def _build(model: Path, engine: Path, cache: Path, *extra: str) -> str:
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(engine), "--trt", "rtx", "--shapes",
                                   "x:1x3x48x192", "--cache-dir", str(cache), "--force", *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_the_result_cache_keys_on_the_identity_and_refuses_an_entry_that_does_not_hold_it(tmp_path):
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
    model, engine, cache = rapidocr_model("cls"), tmp_path / "cls.engine", tmp_path / "cache"
    assert "cache hit" not in _build(model, engine, cache)
    first = json.loads(Path(str(engine) + ".json").read_text())["identity"]["hash"]
    assert first == _ident(model, engine, trt="rtx", shapes="x:1x3x48x192")  # what the cache computes beforehand
    assert "cache hit" in _build(model, engine, cache)

    assert "cache hit" not in _build(model, engine, cache, "--opt-level", "2")  # a setting: another engine
    assert json.loads(Path(str(engine) + ".json").read_text())["identity"]["hash"] != first

    # a stored entry whose manifest no longer hashes to its identity is refused, dropped and rebuilt
    (stored,) = [p for p in cache.glob("*/*/files/cls.engine.json")
                 if json.loads(p.read_text())["identity"]["hash"] == first]
    data = json.loads(stored.read_text())
    data["identity"]["material"]["settings"]["seed"] = 7
    stored.write_text(json.dumps(data))
    out = _build(model, engine, cache)
    assert "refused" in out and "the manifest was edited" in out and "cache hit" not in out
    assert json.loads(Path(str(engine) + ".json").read_text())["identity"]["hash"] == first
    assert "cache hit" in _build(model, engine, cache)
    shutil.rmtree(cache)
