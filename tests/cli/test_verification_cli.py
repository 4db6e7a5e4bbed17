"""What a build says it verified is what it verified (issue 35): an engine that was never run is
never "passed"; every skipped stage says why; the summary line, --json and the HTML report say the
same thing, through the CLI on real TensorRT-RTX builds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


@pytest.fixture(autouse=True)
def _no_result_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRTCONV_RESULT_CACHE_DIR", raising=False)


def _model(folder: Path) -> Path:
    """x [1, 16] @ W [16, 8] then Relu: one MatMul, so FP16 has a layer to run."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=[w])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _build(tmp_path: Path, *flags: object):
    args = ["build", str(_model(tmp_path)), "-o", str(tmp_path / "m.engine"), "--trt", "rtx", "--force", *map(str, flags)]
    return CliRunner().invoke(cli, args)


def _subtitle(report: Path) -> str:
    match = re.search(r'<p id="subtitle">([^<]*)</p>', report.read_text())
    assert match
    return match.group(1)


def test_an_rtx_engine_never_run_is_not_passed(tmp_path):
    report = tmp_path / "r.html"
    res = _build(tmp_path, "--report", report)
    assert res.exit_code == 0, res.output
    skipped = [line for line in res.stderr.splitlines() if line.startswith("trtconv: verify: skipped")]
    assert len(skipped) == 1 and "TensorRT-RTX engines run only on RTX-class GPUs" in skipped[0], res.stderr
    assert f"`trtconv verify {tmp_path / 'm.engine'} --onnx {tmp_path / 'm.onnx'} --trt rtx`" in skipped[0]
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("verification: ")]
    assert line.startswith("verification: engine built, not run: TensorRT-RTX engines run only"), line
    assert "nothing else to verify: no rewrite and no precision change (fp32)" in line
    subtitle = _subtitle(report)
    assert "passed" not in subtitle and "engine built, not run: TensorRT-RTX" in subtitle, subtitle
    assert 'id="engine-run" class="not-run"' in report.read_text()

    res = _build(tmp_path, "--json", "--no-verify")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verification"]["engine_run"] is False and doc["verification"]["engine_verified"] is False
    assert doc["verification"]["engine"] == "engine built, not run: --no-verify"
    assert {"name": "verify", "status": "skipped", "reason": "--no-verify"}.items() <= next(
        s for s in doc["stages"] if s["name"] == "verify").items()


def test_what_onnx_runtime_checked_is_named_and_what_it_did_not_is_too(tmp_path):
    res = _build(tmp_path, "--precision", "fp16", "--random-data", "4", "--json")
    assert res.exit_code == 0, res.output
    v = json.loads(res.stdout)["verification"]
    assert v["verified"] == [] and v["not_verified"] == ["FP16 accuracy measured on random data, not gated"]
    assert v["summary"].endswith("; not verified: FP16 accuracy measured on random data, not gated")

    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(1)
    for i in range(8):
        np.save(calib / f"{i:03d}.npy", rng.standard_normal((1, 16)).astype(np.float32))
    res = _build(tmp_path, "--precision", "fp16", "--calib-data", calib)
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("verification: ")]
    assert "; verified: the FP16 prepared ONNX against the FP32 original on ONNX Runtime (" in line, line
    assert "not verified" not in line


def test_rewrites_say_how_they_were_proven(tmp_path):
    """ONNX Runtime's fused BERT ops, rewritten for RTX: each rewrite's node proof counts as verified; the
    whole graph's proof is named as verified or, where it was skipped, as not verified with why."""
    from fused_builders import tiny_bert

    model = tmp_path / "bert.onnx"
    onnx.save(tiny_bert(batch="batch", seq="seq"), model)
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "bert.engine"), "--trt", "rtx", "--json",
                                   "--shapes", "input_ids:1x8,segment_ids:1x8,mask:1x8"])
    assert res.exit_code == 0, res.output
    v = json.loads(res.stdout)["verification"]
    rewritten = next(s for s in json.loads(res.stdout)["stages"] if s["name"] == "rewrite")["rewritten"]
    assert rewritten > 0
    assert f"{rewritten} of {rewritten} rewrite(s), node by node, against the original op on ONNX Runtime" in v["verified"]
    graph = [x for x in v["verified"] + v["not_verified"] if x.startswith("the rewritten graph")]
    assert len(graph) == 1, v
    assert graph[0] in v["verified"] or "(" in graph[0]  # not verified: always with its reason


def test_a_build_restored_from_the_cache_is_not_passed_either(tmp_path):
    cache, first, second = tmp_path / "cache", tmp_path / "r1.html", tmp_path / "r2.html"
    assert _build(tmp_path, "--cache-dir", cache, "--report", first).exit_code == 0
    for f in tmp_path.glob("m.engine*"):
        f.unlink()
    res = _build(tmp_path, "--cache-dir", cache, "--report", second)
    assert res.exit_code == 0 and "cache hit" in res.stderr, res.output
    subtitle = _subtitle(second)
    assert subtitle.startswith("succeeded (exit 0): restored from the cache; the engine was not run when it was "
                               "built: TensorRT-RTX engines run only"), subtitle
    assert "passed" not in subtitle
