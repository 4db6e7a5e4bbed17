"""End to end with TensorRT: build, deserialize, run, compare with ONNX Runtime.

Marked ``trt``: they run wherever TensorRT and a GPU exist and skip elsewhere with the
reason (tests/conftest.py). Real models (PP-OCR), real calibration data (rendered text
lines, tests/realdata.py), fp32/fp16/int8, static and dynamic shapes, and a DCNv2 graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from builders import cls_calibration, dcn_model
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode, PrecisionNotAchievedError
from trtconv.reference import ort
from trtconv.reference.compare import compare_outputs

pytestmark = pytest.mark.trt

CLS_SHAPES = "x:1x3x48x192"


@pytest.fixture(autouse=True)
def private_timing_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TRTCONV_CACHE_DIR", str(tmp_path / "cache"))


def _build(*args) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["build", *[str(a) for a in args]])
    return res.exit_code, res.output


def _manifest(engine: Path) -> dict:
    return json.loads(Path(str(engine) + ".json").read_text())


def _engine_vs_ort(engine: Path, model: Path, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> float:
    from trtconv.trt.engine import EngineRunner

    proto = onnx.load(str(model))
    feeds = ort.random_feeds(proto, shapes, seed=seed)
    got = EngineRunner(engine).infer(feeds)
    want = ort.run_model(model, feeds)
    return min(s.cosine for s in compare_outputs(want, got))


@pytest.mark.parametrize("precision, min_cosine", [("fp32", 0.9999), ("fp16", 0.999)])
def test_static_cls_engine_matches_onnxruntime(ocr_cls, tmp_path, precision, min_cosine):
    engine = tmp_path / f"cls-{precision}.engine"
    code, out = _build(ocr_cls, "-o", engine, "--shapes", CLS_SHAPES, "--precision", precision)
    assert code == 0, out
    m = _manifest(engine)
    assert m["environment"]["tensorrt"] and m["environment"]["gpu"] and m["environment"]["compute_capability"]
    assert m["verify"]["passed"] is True
    assert m["precision"]["requested"] == precision
    if precision == "fp16":
        assert m["precision"]["achieved"]["share"] >= 0.5
    assert _engine_vs_ort(engine, ocr_cls, {"x": (1, 3, 48, 192)}) >= min_cosine
    timing = list((tmp_path / "cache" / "timing-cache").glob("*.cache"))
    assert len(timing) == 1 and timing[0].stat().st_size > 0  # persisted per GPU + TensorRT version


def test_int8_cls_engine_with_real_calibration(ocr_cls, tmp_path):

    calib = cls_calibration(tmp_path / "calib", n=24)
    engine = tmp_path / "cls-int8.engine"
    code, out = _build(ocr_cls, "-o", engine, "--shapes", CLS_SHAPES, "--precision", "int8", "--int8-unverified", "--calib-data", calib)
    assert code == 0, out
    m = _manifest(engine)
    assert m["calibration"]["data_sha256"] and m["calibration"]["samples"] > 0
    assert m["precision"]["achieved"]["by_dtype"].get("int8", 0) > 0
    assert _engine_vs_ort(engine, ocr_cls, {"x": (1, 3, 48, 192)}) >= 0.99


def test_dynamic_det_engine_at_every_profile_corner(ocr_det, tmp_path):
    engine = tmp_path / "det.engine"
    code, out = _build(ocr_det, "-o", engine, "--min-shapes", "x:1x3x64x64", "--opt-shapes", "x:1x3x320x320",
                       "--max-shapes", "x:2x3x640x640")
    assert code == 0, out
    assert _manifest(engine)["profiles"][0]["x"]["max"] == [2, 3, 640, 640]
    for shape in ((1, 3, 64, 64), (1, 3, 320, 320), (2, 3, 640, 640), (1, 3, 96, 480)):
        assert _engine_vs_ort(engine, ocr_det, {"x": shape}) >= 0.9999, shape


@pytest.mark.parametrize("dcn_target", ["deformconv", "trt-plugin", "trtconv-plugin"])
def test_dcn_model_builds_through_rewrite(tmp_path, dcn_target):
    model = dcn_model(tmp_path / "dcn.onnx")
    engine = tmp_path / f"dcn-{dcn_target}.engine"
    code, out = _build(model, "-o", engine, "--dcn-target", dcn_target)
    assert code == 0, out
    m = _manifest(engine)
    assert any("dcn" in r.get("rule", "") for r in m["rewrites"]), m["rewrites"]
    assert m["verify"]["passed"] is True
    prepared = tmp_path / f"dcn-{dcn_target}.prepared.onnx"
    if dcn_target == "deformconv":  # ORT runs DeformConv: compare the engine with the prepared graph too
        assert _engine_vs_ort(engine, prepared, {}) >= 0.9999


def test_fp32_graph_asked_as_fp16_is_refused_and_not_written(ocr_cls, tmp_path):
    """The assertion itself, against a real engine: an FP32 ONNX built 'as fp16' must fail."""
    from trtconv.plan.build_plan import BuildPlan, TimingCacheChoice
    from trtconv.plan.profiles import build_profiles
    from trtconv.trt.builder import build_engine

    profiles = build_profiles(onnx.load(str(ocr_cls)), shapes=CLS_SHAPES)
    plan = BuildPlan(ocr_cls, tmp_path / "x.engine", precision="fp16", profiles=profiles,
                     timing_cache=TimingCacheChoice(enabled=False))
    with pytest.raises(PrecisionNotAchievedError) as info:
        build_engine(plan, timing_cache=None)
    assert info.value.exit_code == ExitCode.PRECISION_NOT_ACHIEVED
    assert not plan.engine_path.exists()


def test_verify_and_bench_cli(ocr_cls, tmp_path):
    engine = tmp_path / "cls.engine"
    assert _build(ocr_cls, "-o", engine, "--shapes", CLS_SHAPES, "--no-verify")[0] == 0
    res = CliRunner().invoke(cli, ["verify", str(engine), "--onnx", str(ocr_cls), "--shapes", CLS_SHAPES, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["passed"] is True
    res = CliRunner().invoke(cli, ["verify", str(engine), "--onnx", str(ocr_cls), "--shapes", CLS_SHAPES,
                                   "--atol", "0"])
    assert res.exit_code in (0, ExitCode.ACCURACY)  # exact equality is not promised
    res = CliRunner().invoke(cli, ["bench", str(engine), "--iterations", "50", "--warmup", "5", "--json",
                                   "--update-manifest"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"] <= stats["p99_ms"] <= stats["max_ms"]
    assert _manifest(engine)["bench"]["iterations"] == 50


def test_two_profiles_and_compatibility_flags(ocr_det, tmp_path):
    """Two optimization profiles (small and large images), checked at all six corners by the
    build's verify stage, built hardware-compatible (Ampere+)."""
    engine = tmp_path / "det2.engine"
    code, out = _build(ocr_det, "-o", engine, "--hardware-compat", "ampere+", "--workspace", "2G",
                       "--min-shapes", "x:1x3x64x64", "--opt-shapes", "x:1x3x160x160", "--max-shapes", "x:1x3x320x320",
                       "--min-shapes", "x:1x3x320x320", "--opt-shapes", "x:1x3x640x640", "--max-shapes", "x:2x3x960x960")
    assert code == 0, out
    m = _manifest(engine)
    assert len(m["profiles"]) == 2 and m["build"]["hardware_compat"] == "ampere+"
    assert m["build"]["memory_pools"] == {"workspace": 2 << 30}
    corners = [(c["profile"], c["corner"]) for c in m["verify"]["corners"]]
    assert corners == [(0, "min"), (0, "opt"), (0, "max"), (1, "min"), (1, "opt"), (1, "max")]
    assert all(c["passed"] for c in m["verify"]["corners"])


def test_a_failed_build_removes_the_timing_cache_it_created_not_an_existing_one(ocr_cls, tmp_path):
    """TensorRT saves the timing cache before the precision check; a build that then fails (exit 8)
    removes the cache it created. One that existed before the command stays."""
    args = (ocr_cls, "-o", tmp_path / "cls.engine", "--shapes", CLS_SHAPES, "--precision", "fp16", "--exclude-op",
            "Conv")
    code, out = _build(*args)
    assert code == ExitCode.PRECISION_NOT_ACHIEVED, out
    assert not list((tmp_path / "cache").rglob("*.cache"))
    mine = tmp_path / "mine.cache"
    mine.write_bytes(b"")
    code, out = _build(*args, "--timing-cache", mine)
    assert code == ExitCode.PRECISION_NOT_ACHIEVED, out
    assert mine.exists()
