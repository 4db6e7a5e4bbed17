"""`trtconv build/verify/bench` on real models, for everything that runs without TensorRT.

TensorRT's absence is made certain with ``sys.modules["tensorrt"] = None`` (import then
fails as it does on a machine without it), so these tests mean the same on a GPU box.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import cls_calibration, dcn_model
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.reference import ort

CLS_SHAPES = "x:1x3x48x192"


@pytest.fixture
def no_tensorrt(monkeypatch):
    from trtconv.trt.loader import forget

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    forget()
    yield
    forget()


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_prepare_only_writes_an_equivalent_onnx_and_no_engine(ocr_cls, tmp_path: Path):
    out = tmp_path / "cls.engine"
    res = run("build", ocr_cls, "-o", out, "--shapes", CLS_SHAPES, "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["stopped"] == "prepare-only"
    assert [s["name"] for s in report["stages"]] == ["check", "rewrite", "precision", "save", "recheck", "profiles"]
    prepared = tmp_path / "cls.prepared.onnx"
    assert Path(report["prepared_onnx"]) == prepared and prepared.is_file()
    assert not out.exists() and not (tmp_path / "cls.engine.json").exists()
    original = onnx.load(str(ocr_cls))
    feeds = ort.random_feeds(original, {"x": (1, 3, 48, 192)}, seed=3)
    want = ort.run_model(original, feeds)
    got = ort.run_model(prepared, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)
    again = json.loads(run("build", ocr_cls, "-o", out, "--shapes", CLS_SHAPES, "--prepare-only", "--json").stdout)
    sha = [[s["sha256"] for s in r["stages"] if s["name"] == "save"] for r in (report, again)]
    assert sha[0] == sha[1], "the same command must prepare the same bytes"


def test_without_tensorrt_build_stops_with_exit_9(ocr_cls, tmp_path: Path, no_tensorrt):
    """Without TensorRT and without --keep-prepared nothing would be kept: exit 9 right after check (the
    prediction, which says exit 5 first where it refuses), not after rewrite and the precision stage
    (minutes with INT8) whose work it threw away."""
    out = tmp_path / "cls.engine"
    res = run("build", ocr_cls, "-o", out, "--shapes", CLS_SHAPES, "--trt", "11.4", "--json")
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE == 9, res.output
    assert "TensorRT is not available" in res.stderr and "stopped after check (nothing was written)" in res.stderr
    assert "hint: install TensorRT" in res.stderr and "--keep-prepared" in res.stderr
    report = json.loads(res.stdout)
    assert [st["name"] for st in report["stages"]] == ["check"], report
    assert report["stopped"] == "tensorrt-unavailable", report
    assert "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == []  # a failed build leaves nothing, the prepared ONNX included
    # --keep-prepared keeps the prepared ONNX to build elsewhere; running again (still without
    # TensorRT) rewrites it, as derived data, without --force; --json names it and where it stopped.
    for _ in range(2):
        res = run("build", ocr_cls, "-o", out, "--shapes", CLS_SHAPES, "--trt", "11.4", "--keep-prepared", "--json")
        assert res.exit_code == 9
        assert "the prepared ONNX is" in res.stderr and "cls.prepared.onnx" in res.stderr
        assert (tmp_path / "cls.prepared.onnx").is_file()
        assert not out.exists() and not (tmp_path / "cls.engine.json").exists()
    report = json.loads(res.stdout)
    assert report["prepared_onnx"] == str(tmp_path / "cls.prepared.onnx")
    assert report["stopped"] == "tensorrt-unavailable" and report["error"]["exit_code"] == 9
    assert [s["status"] for s in report["stages"]] == ["done", "done", "skipped", "done", "done", "done"]


def test_a_model_with_nothing_to_rewrite_is_copied_and_not_proven_again(tmp_path: Path):
    """PP-OCRv4 det: no rule applies, no input shares a dim name: the rewrite stage hands the model on
    (nothing imported, nothing to prove), the prepared ONNX is its file byte for byte, recheck is
    skipped (check just checked that graph), and the hash recorded is the copy's, read once."""
    from realmodels import rapidocr_model

    from trtconv.load import load_model, model_sha256
    det = rapidocr_model("det")
    res = run("build", det, "-o", tmp_path / "det.engine", "--shapes", "x:1x3x64x64", "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    assert stages["rewrite"]["graph_proof"]["method"] == "identical" and stages["rewrite"]["rewritten"] == 0
    assert stages["save"]["written"] == "the model's file, copied as it is"
    assert stages["recheck"]["status"] == "skipped"
    assert (tmp_path / "det.prepared.onnx").read_bytes() == det.read_bytes()
    assert stages["save"]["sha256"] == model_sha256(load_model(tmp_path / "det.prepared.onnx", load_weights=False))


def test_fp16_prepare_only_makes_precision_explicit(ocr_cls, tmp_path: Path):
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--precision", "fp16",
              "--prepare-only")
    assert res.exit_code == 0, res.output
    prepared = onnx.load(str(tmp_path / "m.prepared.onnx"))
    types = {t.data_type for t in prepared.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types


def test_int8_needs_calibration_data(ocr_cls, tmp_path: Path):
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--precision", "int8")
    assert res.exit_code == ExitCode.USAGE
    assert "--calib-data" in res.stderr


def test_existing_engine_needs_force(ocr_cls, tmp_path: Path):
    out = tmp_path / "m.engine"
    out.write_bytes(b"old engine")
    res = run("build", ocr_cls, "-o", out, "--shapes", CLS_SHAPES)
    assert res.exit_code == ExitCode.USAGE and "already exists" in res.stderr
    assert out.read_bytes() == b"old engine"
    assert not (tmp_path / "m.prepared.onnx").exists()  # refused before any work


def test_dynamic_model_without_shapes_hints_a_command_that_runs(ocr_cls, tmp_path: Path, no_tensorrt):
    """A dynamic width (not only the batch) needs shapes: the hint is a command with real numbers, a
    range said to be placeholders (issue 35), and running it (with --prepare-only) gets through every
    stage TensorRT does not do."""
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine")
    assert res.exit_code == ExitCode.USAGE
    assert "dynamic inputs" in res.stderr and "--min-shapes x:" in res.stderr and "  # placeholders: " in res.stderr
    hint = next(line for line in res.stderr.splitlines() if line.startswith("  hint: "))
    command = hint.removeprefix("  hint: ")
    assert "N" not in command.split("--min-shapes ")[1].split("#")[0], command  # numbers, not a letter to fill in
    words = shlex.split(command, comments=True)  # the whole line pastes: what follows the command is a comment
    assert words[:2] == ["trtconv", "build"]
    again = run(*words[1:], "--prepare-only", "--json")
    assert again.exit_code == 0, again.output
    assert [s["status"] for s in json.loads(again.stdout)["stages"]][-1] == "done"  # the profile corners ran


def _batch_dynamic(path: Path, source: Path) -> Path:
    """The PP-OCR classifier (real weights) with its width fixed: only the batch dim is dynamic."""
    model = onnx.load(str(source))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param = "batch"
    for axis, size in ((2, 48), (3, 192)):
        dims[axis].Clear()
        dims[axis].dim_value = size
    onnx.save(model, str(path))
    return path


def test_batch_dynamic_model_builds_at_batch_1_with_a_warning(ocr_cls, tmp_path: Path):
    model = _batch_dynamic(tmp_path / "cls_b.onnx", ocr_cls)
    res = run("build", model, "-o", tmp_path / "m.engine", "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if "warning:" in line]
    assert warnings == ["trtconv: warning: profile 0 taken from the model, its dynamic batch dim set to 1 (no shapes "
                        "were given): x 1x3x48x192 (give --shapes or --min-shapes/--opt-shapes/--max-shapes to "
                        "choose it)"]
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    # no TensorRT here: no builder follows, so the pre-flight runs the corners (the prepared ONNX is built elsewhere)
    assert stages["profiles"]["status"] == "done" and stages["profiles"]["profiles"] == 1


def test_prepare_only_needs_no_profile(ocr_cls, tmp_path: Path):
    """Width and batch dynamic, no shapes: --prepare-only still writes the prepared ONNX
    (nothing before TensorRT needs shapes); only the corner check is skipped, and says why."""
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    assert stages["profiles"]["status"] == "skipped" and "no profile" in stages["profiles"]["reason"]
    assert (tmp_path / "m.prepared.onnx").is_file()


def test_profile_comes_from_the_calibration_samples(ocr_cls, tmp_path: Path, no_tensorrt):
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i, width in enumerate((96, 192, 192, 320)):  # min 96, most common 192, max 320
        np.save(calib / f"{i}.npy", rng.uniform(-1, 1, (1, 3, 48, width)).astype(np.float32))
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--precision", "fp16", "--calib-data", calib,
              "--no-verify", "--trt", "11.4", "--keep-prepared", "--json")
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    # no TensorRT here: no builder follows, so the pre-flight runs the corners (the prepared ONNX, kept, is built
    # elsewhere)
    assert stages["profiles"]["status"] == "done" and stages["profiles"]["profiles"] == 1
    from trtconv.api import BuildSettings
    from trtconv.load import load_model
    from trtconv.pipeline.build import _sample_shapes
    from trtconv.pipeline.quantize import sample_set
    from trtconv.plan.profiles import build_profiles

    samples = sample_set(load_model(ocr_cls).proto, BuildSettings(calib_data=calib).quantize_settings())
    assert samples is not None
    (profile,) = build_profiles(load_model(ocr_cls).proto, sample_shapes=_sample_shapes(samples))
    x = profile.as_dict()["x"]
    assert (x.min, x.opt, x.max) == ((1, 3, 48, 96), (1, 3, 48, 192), (1, 3, 48, 320))


def test_profile_corner_the_graph_cannot_run_names_the_node(ocr_det, tmp_path: Path):
    res = run("build", ocr_det, "-o", tmp_path / "d.engine", "--prepare-only", "--min-shapes", "x:1x3x33x50",
              "--opt-shapes", "x:1x3x64x64", "--max-shapes", "x:1x3x96x96")
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "profile 0 min shapes (x:1x3x33x50): node 'p2o.Add.248' (Add) fails" in res.stderr
    assert "broadcast" in res.stderr


def test_bad_build_flags(ocr_cls, tmp_path: Path):
    base = ["build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only", "--trt", "11.4"]
    assert run(*base, "--memory-pool", "vram:1G").exit_code == ExitCode.USAGE
    assert run(*base, "--opt-level", "9").exit_code == ExitCode.USAGE
    res = run(*base, "--plugins", tmp_path / "missing.so")
    assert res.exit_code == ExitCode.USAGE and "plugin library" in res.stderr


def _engine_and_inputs(tmp_path: Path, ocr_cls: Path) -> tuple[Path, Path]:
    engine = tmp_path / "cls.engine"
    engine.write_bytes(b"\x00not a real engine")
    good = tmp_path / "good.npz"
    np.savez(good, x=np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32))
    return engine, good


def test_verify_checks_inputs_before_tensorrt(ocr_cls, tmp_path: Path, no_tensorrt):
    engine, good = _engine_and_inputs(tmp_path, ocr_cls)
    wrong_name = tmp_path / "wrong.npz"
    np.savez(wrong_name, images=np.zeros((1, 3, 48, 192), np.float32))
    res = run("verify", engine, "--onnx", ocr_cls, "--inputs", wrong_name)
    assert res.exit_code == ExitCode.BAD_DATA and "missing input(s) 'x'" in res.stderr and "images" in res.stderr
    nan = tmp_path / "nan.npz"
    np.savez(nan, x=np.full((1, 3, 48, 192), np.nan, np.float32))
    res = run("verify", engine, "--onnx", ocr_cls, "--inputs", nan)
    assert res.exit_code == ExitCode.BAD_DATA and "NaN" in res.stderr
    rank = tmp_path / "rank.npz"
    np.savez(rank, x=np.zeros((3, 48, 192), np.float32))
    assert run("verify", engine, "--onnx", ocr_cls, "--inputs", rank).exit_code == ExitCode.BAD_DATA
    res = run("verify", engine, "--onnx", ocr_cls, "--inputs", good)
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE and "TensorRT is not available" in res.stderr
    assert run("verify", tmp_path / "none.engine", "--onnx", ocr_cls).exit_code == ExitCode.USAGE


def test_bench_without_tensorrt(ocr_cls, tmp_path: Path, no_tensorrt):
    engine, _ = _engine_and_inputs(tmp_path, ocr_cls)
    assert run("bench", tmp_path / "none.engine").exit_code == ExitCode.USAGE
    assert run("bench", engine, "--iterations", "0").exit_code == ExitCode.USAGE
    res = run("bench", engine)
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE and "pip install tensorrt" in res.stderr


def test_verify_thresholds_follow_the_manifest_precision(tmp_path: Path):
    from trtconv.api import gate_thresholds
    from trtconv.cli.verify_command import engine_precision

    engine = tmp_path / "m.engine"
    assert engine_precision(engine, None) == "fp32"
    (tmp_path / "m.engine.json").write_text(json.dumps({"schema": 1, "precision": {"requested": "int8"}}))
    assert engine_precision(engine, None) == "int8"
    assert engine_precision(engine, "fp16") == "fp16"
    t = gate_thresholds("int8", {"max_abs": ("0.5",)})
    assert t.max_abs == 0.5 and t.min_cosine == 0.99


def test_progress_sink_follows_tensorrt_phases_across_threads():
    import threading

    from trtconv.cli.build_command import BarSink

    sink = BarSink()
    with sink.bar:
        sink.phase_start("Building engine", None, 2)
        sink.phase_start("Tactic selection", "Building engine", 100)

        def steps(offset: int) -> None:
            for i in range(offset, 100, 4):
                sink.step("Tactic selection", i)

        threads = [threading.Thread(target=steps, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tactic = sink.tasks["Tactic selection"]
        assert sink.bar.tasks[tactic].total == 100
        sink.phase_finish("Tactic selection")
        assert list(sink.tasks) == ["Building engine"]
        sink.step("Unknown phase", 1)  # a phase TensorRT never announced is ignored
        sink.phase_finish("Building engine")
    assert not sink.tasks


@pytest.fixture(scope="module")
def int8_prepared(ocr_cls, tmp_path_factory) -> tuple[Path, Path, object]:
    """One INT8 --prepare-only build of the classifier on real rendered lines, shared by the module:
    (calibration folder, prepared ONNX, CLI result)."""
    folder = tmp_path_factory.mktemp("int8-prepared")
    calib = cls_calibration(folder / "calib")
    res = run("build", ocr_cls, "-o", folder / "q.engine", "--shapes", CLS_SHAPES, "--precision", "int8", "--int8-unverified",
              "--calib-data", calib, "--prepare-only", "--json")
    return calib, folder / "q.prepared.onnx", res


def test_int8_prepare_only_calibrates_on_real_data(int8_prepared):
    _, path, res = int8_prepared
    assert res.exit_code == 0, res.output
    stage = next(s for s in json.loads(res.stdout)["stages"] if s["name"] == "precision")
    assert stage["status"] == "done" and stage["qdq_pairs"] > 0
    prepared = onnx.load(str(path))
    assert any(n.op_type == "QuantizeLinear" for n in prepared.graph.node)


@pytest.mark.parametrize("dcn_target", ["deformconv", "trt-plugin", "trtconv-plugin"])
def test_dcn_graph_is_rewritten_for_every_target(tmp_path: Path, dcn_target):

    model = dcn_model(tmp_path / "dcn.onnx")
    res = run("build", model, "-o", tmp_path / "d.engine", "--dcn-target", dcn_target, "--prepare-only", "--json",
              "--trt", "11.4")
    assert res.exit_code == 0, res.output
    stages = {s["name"]: s for s in json.loads(res.stdout)["stages"]}
    assert stages["check"]["verdict"] == "needs-rewrite" and stages["rewrite"]["rewritten"] == 1
    nodes = onnx.load(str(tmp_path / "d.prepared.onnx")).graph.node
    ops = {n.op_type for n in nodes}
    assert ("", "DCNv2") not in {(n.domain, n.op_type) for n in nodes}  # the CenterNet op is gone
    if dcn_target == "deformconv":  # ONNX Runtime runs it: the profile corners were checked
        assert "DeformConv" in ops and stages["profiles"]["status"] == "done"
        assert stages["recheck"]["verdict"] == "supported"
    else:  # a plugin node ORT cannot run: the corners run on the model's DeformConv form instead
        assert stages["profiles"]["status"] == "done"
        assert stages["profiles"]["graph"] == "original with DCN as DeformConv"
        # TensorRT's own ModulatedDeformConv2d is known to the parser; trtconv's DCNv2 is a plugin op
        assert stages["recheck"]["plugin_ops"] == ([] if dcn_target == "trt-plugin" else ["trtconv::DCNv2"])


def test_unsupported_node_stops_the_build_with_exit_5(tmp_path: Path):
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Unique", ["r"], ["u"], name="unique_values", sorted=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    model = tmp_path / "unique.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    res = run("build", model, "-o", tmp_path / "u.engine", "--prepare-only")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "unique_values (Unique)" in res.stderr
    assert not (tmp_path / "u.prepared.onnx").exists()


def test_fp16_with_calibration_data_measures_activations(ocr_cls, tmp_path: Path):
    calib = cls_calibration(tmp_path / "calib", n=6)
    res = run("build", ocr_cls, "-o", tmp_path / "h.engine", "--shapes", CLS_SHAPES, "--precision", "fp16",
              "--calib-data", calib, "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    stage = next(s for s in json.loads(res.stdout)["stages"] if s["name"] == "precision")
    assert stage["samples"] == 6  # the activation-range rule ran on the real samples


def test_int8_with_dcn_as_tensorrt_plugin_calibrates_on_the_deformconv_form(tmp_path: Path):
    """ONNX Runtime cannot run ModulatedDeformConv2d: the scales come from the DeformConv form."""

    model = dcn_model(tmp_path / "dcn.onnx")
    (tmp_path / "cal").mkdir()
    rng = np.random.default_rng(0)  # the synthetic DCN graph's input: feature maps ~ N(0, 1)
    for i in range(8):
        np.save(tmp_path / "cal" / f"{i}.npy", rng.standard_normal((1, 8, 32, 32)).astype(np.float32))
    res = run("build", model, "-o", tmp_path / "q.engine", "--dcn-target", "trt-plugin", "--precision", "int8", "--int8-unverified",
              "--calib-data", tmp_path / "cal", "--prepare-only", "--trt", "11.4", "--json")
    assert res.exit_code == 0, res.output
    stage = next(s for s in json.loads(res.stdout)["stages"] if s["name"] == "precision")
    assert stage["calibrated_on"] == "DeformConv form" and stage["qdq_pairs"] > 0
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q.prepared.onnx")).graph.node]
    assert "ModulatedDeformConv2d" in ops and "QuantizeLinear" in ops


def test_profile_check_never_lets_onnxruntime_allocate_a_shape_bomb(tmp_path: Path):
    """A few bytes of ConstantOfShape declaring 16 GiB: the corner is not run, and says why."""
    import resource
    import subprocess

    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph([
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Constant", [], ["bomb_shape"],
                         value=numpy_helper.from_array(np.array([65536, 65536], np.int64))),
        helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("bomb", TensorProto.FLOAT, None)])
    model = tmp_path / "bomb.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    res = subprocess.run([sys.executable, "-m", "trtconv", "build", str(model), "-o", str(tmp_path / "b.engine"),
                          "--prepare-only", "--json"], capture_output=True, text=True, preexec_fn=limited,
                         timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    stage = next(s for s in json.loads(res.stdout)["stages"] if s["name"] == "profiles")
    (reason,) = stage["not_run"]
    assert reason.startswith("the static shapes: tensor 'bomb' alone would need 16.0 GiB")


def test_int8_on_a_model_that_already_has_qdq_is_refused(int8_prepared, tmp_path: Path):
    """trtconv's own INT8 output given back to an INT8 build (the module's prepared ONNX: Q/DQ throughout)."""
    calib, prepared, made = int8_prepared
    assert made.exit_code == 0, made.output
    quantized = tmp_path / "cls.int8.onnx"
    shutil.copyfile(prepared, quantized)
    res = run("build", quantized, "-o", tmp_path / "q.engine", "--shapes", CLS_SHAPES, "--precision", "int8", "--int8-unverified",
              "--calib-data", calib, "--prepare-only")
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "already holds" in res.stderr and "QuantizeLinear/DequantizeLinear" in res.stderr
    assert "--precision fp32" in res.stderr  # the hint: build it as it is
    assert not (tmp_path / "q.prepared.onnx").exists()


def test_replacing_the_default_prepared_onnx_says_so(ocr_cls, tmp_path: Path):
    args = ["build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--prepare-only"]
    assert "replacing" not in run(*args).stderr
    again = run(*args)
    assert again.exit_code == 0
    assert f"trtconv: warning: replacing {tmp_path / 'm.prepared.onnx'}" in again.stderr
    explicit = run(*args, "--prepared", tmp_path / "m.prepared.onnx")  # named: an output like any other
    assert explicit.exit_code == ExitCode.USAGE and "already exists" in explicit.stderr


def test_no_tensorrt_hint_names_trtexec_strongly_typed(ocr_cls, tmp_path: Path, no_tensorrt):
    res = run("build", ocr_cls, "-o", tmp_path / "m.engine", "--shapes", CLS_SHAPES, "--precision", "fp16",
              "--trt", "11.4")
    assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE
    assert "trtexec --stronglyTyped" in res.stderr


def test_docs_and_help_agree_with_the_code():
    from trtconv.pipeline.quantize import INT8_JUDGING_SHARE
    from trtconv.precision import samples_needed

    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    held_out_row = next(line for line in docs.splitlines() if line.startswith("| `--held-out N"))
    # build shares quantize's flag
    assert f"default {INT8_JUDGING_SHARE:.0%}, at least the {samples_needed()} a pass needs" in held_out_row
    bench_help = run("bench", "--help").stdout
    assert "dynamic inputs without --shapes" not in bench_help
    assert "Dynamic inputs run at the opt shape of profile 0" in " ".join(bench_help.split())
    assert "Dynamic inputs run at the opt shape of profile 0 unless `--shapes` says otherwise" in docs


def test_verify_takes_a_folder_or_a_list_of_sample_files(ocr_cls, tmp_path: Path, no_tensorrt):
    engine, good = _engine_and_inputs(tmp_path, ocr_cls)
    folder = tmp_path / "many"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.savez(folder / f"{i}.npz", x=rng.standard_normal((1, 3, 48, 64 + 32 * i)).astype(np.float32),
                 label=np.array(i))
    packed = tmp_path / "packed.npz"
    np.savez(packed, **{f"{i:03d}/x": np.zeros((1, 3, 48, 96), np.float32) for i in range(2)})
    for inputs in ([folder], [good, packed], [packed]):
        res = run("verify", engine, "--onnx", ocr_cls, *[a for p in inputs for a in ("--inputs", p)])
        assert res.exit_code == ExitCode.TENSORRT_UNAVAILABLE, res.output  # every sample checked, then TensorRT
    np.savez(folder / "3.npz", x=np.zeros((1, 4, 48, 64), np.float32))
    res = run("verify", engine, "--onnx", ocr_cls, "--inputs", folder)
    assert res.exit_code == ExitCode.BAD_DATA and "3.npz" in res.stderr and "fixes dim 1 to 3" in res.stderr
    from PIL import Image

    Image.new("RGB", (8, 8)).save(folder / "stray.png")
    res = run("verify", engine, "--onnx", ocr_cls, "--inputs", folder)
    assert res.exit_code == ExitCode.BAD_DATA and "mixes" in res.stderr


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_dcn_target_portable_prepares_standard_ops_only(tmp_path: Path, precision: str):
    """build --dcn-target portable: the prepared ONNX holds no plugin and no custom op, and
    computes what the DeformConv form computes (FP16: within FP16's precision)."""
    src = dcn_model(tmp_path / "dcn.onnx")
    res = run("build", src, "-o", tmp_path / "m.engine", "--dcn-target", "portable", "--precision", precision,
              "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    prepared = onnx.load(str(tmp_path / "m.prepared.onnx"))
    assert {n.domain for n in prepared.graph.node} == {""} and "Gather" in {n.op_type for n in prepared.graph.node}
    reference = tmp_path / "ref.onnx"
    assert run("rewrite", src, "-o", reference).exit_code == 0  # the DeformConv form, run by ONNX Runtime
    feeds = ort.random_feeds(onnx.load(str(src)), {}, seed=1)
    want = ort.run_model(reference, feeds)["y"]
    got = ort.run_model(prepared, feeds)["y"].astype(np.float64)
    rtol = 1e-5 if precision == "fp32" else 1e-2
    assert np.abs(got - want).max() <= rtol * max(1.0, float(np.abs(want).max()))
