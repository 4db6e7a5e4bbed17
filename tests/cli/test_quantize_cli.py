"""``trtconv quantize``: exit codes, JSON schema, atomic output, wiring of fp16 and int8."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from realdata import ocr_line_images

from trtconv.cli.main import cli
from trtconv.errors import ExitCode


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def line_images(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lines")
    ocr_line_images(folder, range(3), flip_every=2)
    return folder


def test_fp16_json_report_and_output(ocr_cls, line_images, tmp_path):
    out = tmp_path / "cls.fp16.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--calib-data", line_images,
                  "--preprocess", "preset=ppocr-cls", "--exclude-op", "Softmax", "--min-cosine", "0.999", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "trtconv.quantize/1"
    assert doc["precision"] == "fp16" and doc["written"] is True and doc["passed"] is True
    assert doc["int8"] is None and doc["samples"]["count"] == 3
    assert doc["samples"]["source"]["kind"] == "images"
    fp16 = doc["fp16"]
    assert fp16["kept_by_rule"] == {"excluded-op": 1}
    assert fp16["kept"][0]["op_type"] == "Softmax" and fp16["kept"][0]["rule"] == "excluded-op"
    assert fp16["converted"] == fp16["float_nodes"] - 1 and fp16["casts_inserted"] >= 2
    assert doc["accuracy"] and doc["accuracy"][0]["cosine"] > 0.999
    model = onnx.load(str(out))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert "checking accuracy" in res.stderr  # progress goes to stderr, never into the JSON


def test_fp16_human_summary_groups_kept_nodes_by_rule(ocr_cls, line_images, tmp_path):
    out = tmp_path / "cls.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--calib-data", line_images,
                  "--preprocess", "preset=ppocr-cls", "--exclude", "Conv@0,Conv@1", "--max-activation", "20")
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "kept in FP32, by rule:" in text
    assert "excluded-name" in text and "activation-range" in text and "reaches" in text
    assert "error against FP32 on 3 sample(s)" in text and f"wrote {out}" in text


def test_accuracy_threshold_exits_7_and_writes_nothing(ocr_cls, line_images, tmp_path):
    out = tmp_path / "cls.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--calib-data", line_images,
                  "--preprocess", "preset=ppocr-cls", "--max-abs", "1e-12", "--json")
    assert res.exit_code == ExitCode.ACCURACY
    assert not out.exists() and not list(tmp_path.glob(".trtconv-tmp-*"))
    doc = json.loads(res.stdout)
    assert doc["written"] is False and doc["passed"] is False
    assert any("max abs error" in v for v in doc["fp16"]["violations"])
    assert "trtconv: error: FP16 model fails the accuracy check" in res.stderr


def test_without_data_fp16_warns_and_still_converts(ocr_cls, tmp_path):
    out = tmp_path / "cls.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--fp16-io")
    assert res.exit_code == 0, res.output
    assert "no sample data" in res.stderr
    # said once, in the gate's line (not also as "accuracy: not checked")
    assert [line for line in res.stdout.splitlines() if "not checked" in line and "accuracy" in line] == [
        "accuracy gate: not checked (no sample data)"]
    model = onnx.load(str(out))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    # a second run without --force refuses to overwrite; with --force it replaces the file
    again = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16")
    assert again.exit_code == ExitCode.USAGE and "--force" in again.stderr
    forced = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--force")
    assert forced.exit_code == 0
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_fp16_says_which_int8_only_flags_it_was_given(ocr_cls, tmp_path):
    """fp16 reads no calibration method, no claim and no auto-exclusion: given them, it took them in silence (a
    retry hint from int8 to fp16 keeps the user's int8 flags, so a warning, not a refusal). build says the same."""
    res = _invoke("quantize", ocr_cls, "-o", tmp_path / "a.onnx", "--precision", "fp16", "--calib-method", "entropy",
                  "--int8-unverified")
    assert res.exit_code == 0, res.output
    assert "--calib-method, --int8-unverified have no effect with --precision fp16 (int8 only)" in res.stderr
    plain = _invoke("quantize", ocr_cls, "-o", tmp_path / "b.onnx", "--precision", "fp16")
    assert plain.exit_code == 0 and "no effect" not in plain.stderr, plain.output
    built = _invoke("build", ocr_cls, "-o", tmp_path / "c.engine", "--precision", "fp16", "--prepare-only",
                    "--no-auto-exclude")
    assert built.exit_code == 0, built.output
    assert "--auto-exclude has no effect with --precision fp16 (int8 only)" in built.stderr, built.stderr
    split = _invoke("quantize", ocr_cls, "-o", tmp_path / "d.onnx", "--precision", "fp16", "--held-out", "3",
                    "--sources", "files", "--split-seed", "2")  # the split into parts is int8's too
    assert split.exit_code == 0, split.output
    assert "--held-out, --sources, --split-seed have no effect with --precision fp16 (int8 only)" in split.stderr


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--precision", "int8"], ExitCode.USAGE, "int8 needs calibration data"),
        (["--precision", "fp16", "--random-data", "2", "--calib-data", "x"], ExitCode.USAGE, "mutually exclusive"),
        (["--precision", "fp16", "--preprocess", "preset=ppocr-cls"], ExitCode.USAGE, "preprocess applies"),
        (["--precision", "fp16", "--calib-data", "missing-folder"], ExitCode.BAD_DATA, "no such file"),
        (["--precision", "fp16", "--random-data", "1"], ExitCode.USAGE, "dynamic dims"),
        # limits nothing can meet are refused before any work (a cosine is at most 1)
        (["--precision", "int8", "--min-cosine", "1.5"], ExitCode.USAGE, "a cosine is at most 1"),
        (["--precision", "int8", "--min-cosine", "scores=nan"], ExitCode.USAGE, "a cosine is a number"),
        (["--precision", "int8", "--min-cosine", "-2"], ExitCode.USAGE, "a cosine is at least -1"),
        (["--precision", "fp16", "--min-top1", "2"], ExitCode.USAGE, "share of samples) is at most 1"),
        (["--precision", "fp16", "--max-abs", "-0.1"], ExitCode.USAGE, "a tolerance is at least 0"),
    ],
)
def test_bad_flags_and_data_have_documented_exit_codes(ocr_cls, tmp_path, extra, code, message):
    res = _invoke("quantize", ocr_cls, "-o", tmp_path / "o.onnx", *extra)
    assert res.exit_code == code, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output


def test_wrong_sample_dtype_is_bad_data(ocr_cls, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "0.npy", np.zeros((1, 3, 48, 192), np.float64))
    res = _invoke("quantize", ocr_cls, "-o", tmp_path / "o.onnx", "--precision", "fp16", "--calib-data", data)
    assert res.exit_code == ExitCode.BAD_DATA
    assert "float64" in res.stderr and not (tmp_path / "o.onnx").exists()


def test_random_data_with_shapes_for_a_dynamic_model(ocr_cls, tmp_path):
    out = tmp_path / "o.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "fp16", "--random-data", "2",
                  "--shapes", "x:1x3x48x192", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["samples"]["count"] == 2


def test_int8_is_wired_through_the_same_command(ocr_cls, line_images, tmp_path):
    out = tmp_path / "cls.int8.onnx"
    res = _invoke("quantize", ocr_cls, "-o", out, "--precision", "int8", "--int8-unverified", "--calib-data", line_images,
                  "--preprocess", "preset=ppocr-cls", "--calib-method", "minmax", "--held-out", "1", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "trtconv.quantize/1" and doc["fp16"] is None
    assert doc["int8"]["method"] == "minmax" and doc["int8"]["placed"]
    assert doc["samples"]["accuracy_samples"] == 1
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_fp16_silero_from_npz_samples(silero, tmp_path):
    """Several inputs (audio, recurrent state, int64 sample rate) from .npz files; the network is in If bodies."""
    from realdata import silero_samples

    data = tmp_path / "npz"
    data.mkdir()
    for i, sample in enumerate(silero_samples(silero, range(1), seconds=1.0, every=8)):
        np.savez(data / f"{i:02d}.npz", **sample)
    out = tmp_path / "vad.fp16.onnx"
    res = _invoke("quantize", silero, "-o", out, "--precision", "fp16", "--calib-data", data,
                  "--max-abs", "0.05", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["samples"]["source"]["kind"] == "npy" and doc["samples"]["count"] >= 3
    assert {s["name"] for s in doc["accuracy"]} == {"output", "stateN"}
    inside = sum(n for g, n in doc["fp16"]["converted_by_graph"].items() if g != "main")
    assert inside > 100
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)


def test_a_weight_computed_from_constants_is_skipped_with_a_way_out_that_works(tmp_path):
    """The ONNX test suite's light_inception_v2 (weights made by ConstantOfShape) got 0 of 69 Conv weights
    quantized ("weight is computed at run time, not a constant"), and `build --precision int8` then failed
    exit 8 with no word of why. The skip now says that `trtconv rewrite` folds such a weight; it does:
    quantized after the rewrite, the Conv's weight gets its Q/DQ."""
    shape = numpy_helper.from_array(np.array([8, 3, 3, 3], np.int64), "wshape")
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w0"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])),
             helper.make_node("Sin", ["w0"], ["w"]),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [shape])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)

    def quantize(path: Path):
        return CliRunner().invoke(cli, ["quantize", str(path), "--precision", "int8", "--random-data", "20",
                                        "-o", str(path.with_suffix(".q.onnx")), "--json"])

    # no compute layer can take INT8: exit 8 before calibrating (it wrote a model with 0 INT8 layers at exit 0)
    res = quantize(model)
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "only 0 of 1 compute layers" in errors[0], res.stderr
    assert "`trtconv rewrite` folds it first" in errors[0] and not model.with_suffix(".q.onnx").exists()
    folded = tmp_path / "f.onnx"
    assert CliRunner().invoke(cli, ["rewrite", str(model), "-o", str(folded)]).exit_code == 0
    res = quantize(folded)
    assert res.exit_code == 0, res.output
    assert "weight" in [p["kind"] for p in json.loads(res.stdout)["int8"]["placed"]]


def test_a_spec_files_limit_nothing_can_meet_is_refused_before_any_work(ocr_cls, tmp_path):
    """A spec file's bare number takes the same check as the flag (it skipped it: calibration ran, then exit 8)."""
    spec = tmp_path / "q.toml"
    spec.write_text("min-cosine = 1.5\n")
    res = _invoke("quantize", "--config", spec, ocr_cls, "-o", tmp_path / "o.onnx", "--precision", "int8",
                  "--random-data", "2", "--shapes", "x:1x3x48x192")
    assert res.exit_code == ExitCode.USAGE, res.output
    assert f"spec file {spec}: min-cosine: '1.5': a cosine is at most 1" in res.stderr, res.stderr
    assert not (tmp_path / "o.onnx").exists()
