"""`trtconv inspect` on a TensorRT 10/11 engine, read live through the engine inspector, and the
manifest's GPU properties. Marked ``trt``: runs where TensorRT and a GPU exist, skips elsewhere
with the reason (tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli

pytestmark = pytest.mark.trt


def _run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.output, res.stdout


def test_inspect_reads_a_tensorrt_engine_live_and_matches_its_recorded_table(ocr_cls, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTCONV_CACHE_DIR", str(tmp_path / "cache"))
    engine = tmp_path / "cls.engine"
    code, out, _ = _run("build", ocr_cls, "-o", engine, "--shapes", "x:1x3x48x192", "--precision", "fp16", "--layers")
    assert code == 0, out
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    gpu = manifest["environment"]["gpu_properties"]
    assert gpu["sm_count"] > 0 and gpu["memory_bytes"] > 0 and gpu["compute_capability"]
    assert manifest["identity"]["material"]["target"]["gpu"] == [gpu["name"], gpu["compute_capability"]]
    code, out, stdout = _run("inspect", engine, "--json")
    assert code == 0, out
    report = json.loads(stdout)
    assert report["layers"]["from"] == "engine"  # the engine inspector, now
    assert [r["name"] for r in report["layers"]["rows"]] == [layer["Name"] for layer in manifest["layers"]["layers"]]
    assert any(r["precision"] == "fp16" for r in report["layers"]["rows"])
    assert report["bindings"] == manifest["bindings"]
    assert report["profiles"] == manifest["profiles"]
