"""Real TensorRT-RTX engines, built through `trtconv build --trt rtx` on a machine without a GPU.

TensorRT-RTX's parser and builder are real native libraries from PyPI (the `test` extra) that
build ahead of time on the CPU, so these run everywhere, unmarked. Real models with real weights
(tests/realmodels.py), FP32/FP16/INT8 (trtconv's own Q/DQ), static and dynamic shapes. An RTX
engine cannot be run here (no RTX GPU; H100s refuse it), so what is asserted is what the build
itself proves: exit code, engine bytes, manifest fields, the network precision check.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from builders import two_inputs_one_dim_name
from click.testing import CliRunner
from realmodels import ddddocr_model, magika_model, nudenet_model, rapidocr_model, silero_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.plan.build_plan import RTX_DEFAULT_COMPUTE_CAPABILITIES

tensorrt_rtx = pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")


NO_GATE = ("--min-cosine", "0")  # for tests of engine structure: the INT8 accuracy gate is tested elsewhere


def _build(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", *[str(a) for a in args]])
    return res.exit_code, res.output


def _manifest(engine: Path) -> dict:
    return json.loads(Path(str(engine) + ".json").read_text())


def _assert_rtx_engine(engine: Path, precision: str) -> dict:
    """What every RTX build must leave behind; returns the manifest for the test's own checks."""
    assert engine.stat().st_size > 100_000
    m = _manifest(engine)
    assert m["environment"]["tensorrt"] == tensorrt_rtx.__version__
    assert m["environment"]["tensorrt_flavour"] == "TensorRT-RTX"
    assert m["build"]["target"] == "rtx"
    assert m["build"]["timing_cache"] is False  # never touched on RTX
    assert m["engine"]["sha256"] == hashlib.sha256(engine.read_bytes()).hexdigest()
    assert m["precision"]["requested"] == precision
    assert m["precision"]["achieved"]["checked_on"] == "network"
    assert m["verify"]["passed"] is None  # nothing here can run an RTX engine
    return m


# (id, model, shape flags): static ones use --shapes; dynamic ones a min/opt/max profile.
FP32_MODELS = [
    ("ppocr-det-dynamic", lambda: rapidocr_model("det"),
     ["--min-shapes", "x:1x3x32x32", "--opt-shapes", "x:1x3x64x64", "--max-shapes", "x:1x3x96x128"]),
    ("ppocr-rec-static", lambda: rapidocr_model("rec"), ["--shapes", "x:1x3x48x160"]),
    ("magika-dynamic", magika_model,
     ["--min-shapes", "bytes:1x2048", "--opt-shapes", "bytes:2x2048", "--max-shapes", "bytes:4x2048"]),
    ("silero-sequence-dynamic", lambda: silero_model("silero_vad_16k_sequence.onnx"),
     ["--min-shapes", "input:1x576", "--opt-shapes", "input:2x576", "--max-shapes", "input:4x576"]),
    ("silero-ifless-static", lambda: silero_model("silero_vad_op18_ifless.onnx"),
     ["--shapes", "input:1x512,state:2x1x128"]),
    ("silero-openvino-static", lambda: silero_model("silero_vad_openvino_16k.onnx"), []),
    ("nudenet-yolov8-dynamic", nudenet_model,
     ["--min-shapes", "images:1x3x160x160", "--opt-shapes", "images:1x3x256x256", "--max-shapes", "images:1x3x320x320"]),
    ("ddddocr-yolox-static", ddddocr_model, []),
]


@pytest.mark.parametrize("model, flags", [pytest.param(m, f, id=i) for i, m, f in FP32_MODELS])
def test_real_models_build_fp32_rtx_engines(model, flags, tmp_path):
    engine = tmp_path / "model.engine"
    code, out = _build(model(), "-o", engine, *flags)
    assert code == 0, out
    m = _assert_rtx_engine(engine, "fp32")
    assert m["build"]["compute_capabilities"] == list(RTX_DEFAULT_COMPUTE_CAPABILITIES)
    dynamic = "--min-shapes" in flags
    if dynamic:
        name, _, dims = flags[flags.index("--max-shapes") + 1].partition(":")
        assert m["profiles"][0][name]["max"] == [int(d) for d in dims.split("x")]
    assert m["precision"]["achieved"]["by_dtype"].get("fp32", 0) > 0
    assert "fp16" not in m["precision"]["achieved"]["by_dtype"]


@pytest.mark.parametrize("model, shapes", [
    pytest.param(lambda: rapidocr_model("det"), ["--shapes", "x:1x3x64x96"], id="ppocr-det"),
    pytest.param(nudenet_model, ["--min-shapes", "images:1x3x160x160", "--opt-shapes", "images:1x3x224x224",
                                 "--max-shapes", "images:1x3x320x320"], id="nudenet-dynamic"),
])
def test_fp16_builds_and_its_convolutions_are_fp16_in_the_network(model, shapes, tmp_path):
    engine = tmp_path / "fp16.engine"
    code, out = _build(model(), "-o", engine, "--precision", "fp16", *shapes)
    assert code == 0, out
    achieved = _assert_rtx_engine(engine, "fp16")["precision"]["achieved"]
    assert achieved["by_dtype"].get("fp16", 0) > achieved["by_dtype"].get("fp32", 0)
    assert achieved["share"] >= 0.5


def test_int8_qdq_recognizer_builds_dynamic_and_counts_int8_layers(rec_int8_rtx):
    """trtconv's own INT8 Q/DQ (symmetric, calibrated on rendered text lines): a Conv/MatMul fed by a
    Dequantize of INT8 counts as INT8, as TensorRT fuses Q/DQ into it. The engine is the session's
    (tests/conftest.py rec_int8_rtx: a dynamic width and batch profile)."""
    engine, code, out, _, _ = rec_int8_rtx
    assert code == 0, out
    m = _assert_rtx_engine(engine, "int8")
    by = m["precision"]["achieved"]["by_dtype"]
    assert by["int8"] > 10 * by.get("fp32", 0)
    assert m["calibration"]["samples"] > 0


def test_asking_more_int8_than_the_network_has_exits_8_and_writes_no_engine(rec_int8_rtx, tmp_path):
    """The share check has teeth: the recognizer keeps a couple of matrix products out of INT8 (the
    attention-probability MatMuls, in the FP16 remainder), so requiring every one in INT8 fails, with
    nothing written — before calibrating, since where Q/DQ can go is known then (the network's own
    check after the build, tests/plan/test_precision_check.py, is the later net)."""
    _, _, _, shared_cache, text_lines = rec_int8_rtx
    engine = tmp_path / "rec-int8.engine"
    cache = tmp_path / "rec.cache"
    for suffix in ("", ".key.json"):
        shutil.copyfile(str(shared_cache) + suffix, str(cache) + suffix)
    code, out = _build(rapidocr_model("rec"), "-o", engine, "--precision", "int8", "--int8-unverified", "--calib-data", text_lines,
                       "--calib-cache", cache, "--shapes", "x:1x3x48x192", "--min-precision-share", "1.0", *NO_GATE)
    assert code == ExitCode.PRECISION_NOT_ACHIEVED, out
    errors = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "compute layers (Conv/MatMul/Gemm) can take INT8" in errors[0], out
    assert "attention probabilities" in errors[0] and "build: " not in out  # the reason; no build ran
    assert not engine.exists() and not Path(str(engine) + ".json").exists()


def test_compute_capabilities_reach_the_engine_and_the_manifest(tmp_path):
    engine = tmp_path / "det.engine"
    code, out = _build(rapidocr_model("det"), "-o", engine, "--shapes", "x:1x3x64x64",
                       "--compute-capability", "8.6,sm120")
    assert code == 0, out
    assert _assert_rtx_engine(engine, "fp32")["build"]["compute_capabilities"] == ["8.6", "12.0"]


@pytest.mark.parametrize("flags, words", [
    (["--compute-capability", "9.0"], "cannot target compute capability '9.0'"),
    (["--timing-cache", "t.cache"], "no timing cache"),
    (["--hardware-compat", "ampere+"], "--hardware-compat"),
])
def test_options_rtx_has_no_use_for_are_usage_errors_before_any_work(flags, words, tmp_path):
    engine = tmp_path / "det.engine"
    code, out = _build(rapidocr_model("det"), "-o", engine, "--shapes", "x:1x3x64x64", *flags)
    assert code == ExitCode.USAGE, out
    assert words in out
    assert not list(tmp_path.iterdir())  # not even the prepared ONNX


def test_shared_dim_names_are_renamed_so_a_non_square_profile_builds(tmp_path):
    """PP-OCR's classifier names its height and width dims both "?": TensorRT treats equally named dims
    as equal, so 48 vs 192 fails RTX's builder. `check` reports it (shared-dim-names) and the rewrite
    stage gives the width its own name: the real builder then accepts the 48x192 profile."""
    engine = tmp_path / "cls.engine"
    code, out = _build(rapidocr_model("cls"), "-o", engine, "--shapes", "x:1x3x48x192")
    assert code == ExitCode.OK, out
    assert engine.exists()


def test_a_model_the_real_builder_rejects_exits_6_with_its_message(tmp_path):
    """Two inputs naming a dim alike ("n") with different --shapes: TensorRT treats equally named dims as
    equal, so 4 vs 8 is contradictory (`check` flags this only within one input, where the names are
    an exporter's accident). The builder's own words reach the user in one line."""
    model = two_inputs_one_dim_name(tmp_path)
    engine = tmp_path / "two.engine"
    code, out = _build(model, "-o", engine, "--shapes", "a:1x4,b:1x8")
    assert code == ExitCode.BUILD_FAILED, out
    assert "TensorRT-RTX's builder failed" in out and "Input dimensions with this name have different constant values" in out
    assert "Traceback" not in out
    assert not engine.exists() and not Path(str(engine) + ".json").exists()


def test_silero_vad_lstm_in_if_is_refused_by_check_on_rtx(tmp_path):
    """Silero VAD keeps its LSTM inside If branches and uses its Y_h there; `check` refuses those LSTM
    nodes for TensorRT-RTX (exit 5, stage builder: measured), before the builder would fail on them
    (see test_rtx_adapter.py)."""
    code, out = _build(silero_model(), "-o", tmp_path / "vad.engine", "--shapes", "input:1x512,state:2x1x128")
    assert code == ExitCode.UNSUPPORTED, out
    assert "TensorRT-RTX cannot build" in out and "(LSTM)" in out
    assert not (tmp_path / "vad.engine").exists()


def test_json_report_says_why_verify_was_skipped(tmp_path):
    engine = tmp_path / "seq.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(silero_model("silero_vad_16k_sequence.onnx")),
                                   "-o", str(engine), "--shapes", "input:1x576", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["build"]["status"] == "done" and stages["build"]["timing_cache"] is None
    assert stages["verify"]["status"] == "skipped" and "RTX" in stages["verify"]["reason"]
    assert report["manifest_data"]["build"]["compute_capabilities"] == list(RTX_DEFAULT_COMPUTE_CAPABILITIES)


def test_verify_picks_the_rtx_runtime_from_the_manifest_and_needs_an_rtx_gpu(tmp_path):
    """verify/bench read the engine's manifest: an RTX engine goes to TensorRT-RTX's runtime, which
    needs an RTX-class GPU; without one the answer is exit 9 in words, not a CUDA error."""
    from trtconv.trt.environment import probe

    if probe(import_tensorrt=False).gpus:
        pytest.skip("a GPU is visible: the manifest's compute capabilities decide there (tests/plan/test_manifest.py)")
    engine = tmp_path / "det.engine"
    det = rapidocr_model("det")
    assert _build(det, "-o", engine, "--shapes", "x:1x3x64x64")[0] == 0
    res = CliRunner().invoke(cli, ["verify", str(engine), "--onnx", str(det), "--shapes", "x:1x3x64x64"])
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    assert "TensorRT-RTX engine" in res.output and "RTX-class GPU" in res.output
