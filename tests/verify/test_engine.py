"""The verdict verify gives an engine, exercised with ONNX Runtime standing in for the engine's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from realdata import silero_samples

from trtconv.reference import ort
from trtconv.reference.compare import DEFAULT_THRESHOLDS
from trtconv.verify.engine_vs_reference import compare_with_reference, make_inputs


@pytest.fixture(scope="module")
def cls_case(ocr_cls):
    model = onnx.load(str(ocr_cls))
    feeds = make_inputs(model, inputs=None, shapes={"x": (2, 3, 48, 192)}, seed=5)
    return ocr_cls, feeds, ort.run_model(ocr_cls, feeds)


def test_identical_outputs_pass_every_precision(cls_case):
    path, feeds, outs = cls_case
    for precision, limits in DEFAULT_THRESHOLDS.items():
        report = compare_with_reference(path, feeds, outs, limits, seed=5)
        assert report.passed, (precision, report.failures)
        assert report.to_json()["inputs"] == {"x": [2, 3, 48, 192]}


def test_fp16_like_error_passes_fp16_but_garbage_fails(cls_case):
    path, feeds, outs = cls_case
    rng = np.random.default_rng(0)
    close = {k: (v.astype(np.float16).astype(np.float32)) for k, v in outs.items()}
    assert compare_with_reference(path, feeds, close, DEFAULT_THRESHOLDS["fp16"]).passed
    garbage = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in outs.items()}
    report = compare_with_reference(path, feeds, garbage, DEFAULT_THRESHOLDS["fp16"])
    assert not report.passed and "cosine" in report.failures[0]


def test_missing_engine_output_is_a_failure_not_a_crash(cls_case):
    path, feeds, _ = cls_case
    report = compare_with_reference(path, feeds, {}, DEFAULT_THRESHOLDS["fp32"])
    assert not report.passed and "engine has no output named" in report.failures[0]


def test_inputs_are_seeded(ocr_cls):
    model = onnx.load(str(ocr_cls))
    a = make_inputs(model, inputs=None, shapes={"x": (1, 3, 48, 192)}, seed=1)
    b = make_inputs(model, inputs=None, shapes={"x": (1, 3, 48, 192)}, seed=1)
    np.testing.assert_array_equal(a["x"], b["x"])
    c = make_inputs(model, inputs=None, shapes={"x": (1, 3, 48, 192)}, seed=2)
    assert not np.array_equal(a["x"], c["x"])


def test_verify_refuses_a_reference_run_that_cannot_fit(tmp_path):
    """Checked before TensorRT is loaded: exit 3 naming the tensor, not the OOM killer (the CLI
    runs under a 6 GiB address-space limit, so the verdict is the same on any machine)."""
    import resource
    import subprocess
    import sys

    from onnx import TensorProto, helper, numpy_helper

    from trtconv.errors import ExitCode

    g = helper.make_graph([
        helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([65536, 65536], np.int64))),
        helper.make_node("ConstantOfShape", ["s"], ["bomb"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Relu", ["x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("bomb", TensorProto.FLOAT, None)])
    model = tmp_path / "bomb.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    engine = tmp_path / "bomb.engine"
    engine.write_bytes(b"never read")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    res = subprocess.run([sys.executable, "-m", "trtconv", "verify", str(engine), "--onnx", str(model)],
                         capture_output=True, text=True, preexec_fn=limited, timeout=120)
    assert res.returncode == ExitCode.INVALID_MODEL, res.stderr[-2000:]
    assert "'bomb' alone would need 16.0 GiB" in res.stderr and "Traceback" not in res.stderr


def test_an_output_of_one_value_is_judged_by_its_error_not_its_sign(silero):
    """Silero VAD's speech probability is one value ([1, 1]): its own cosine is 1 whenever the sign agrees, so an
    engine that read 0.9 as 0.5 would pass on it. verify measures it by its error against the value instead
    (1/sqrt(1 + e^2), on the cosine's scale), as the precision gates do; the other outputs keep the cosine."""
    feeds = silero_samples(silero, range(1), seconds=2.0, every=4)[-1]  # synthesised speech, its own state
    outs = ort.run_model(silero, feeds)
    prob = next(k for k, v in outs.items() if v.size == 1)
    assert float(outs[prob].ravel()[0]) != 0.0
    assert compare_with_reference(silero, feeds, outs, DEFAULT_THRESHOLDS["fp16"]).passed
    scaled = {**outs, prob: outs[prob] * 0.6}  # same sign, 40 % off
    report = compare_with_reference(silero, feeds, scaled, DEFAULT_THRESHOLDS["fp16"])
    assert not report.passed and prob in report.failures[0]
    by_name = {s.name: s for s in report.stats}
    assert by_name[prob].measure == "error-vs-rms" and abs(by_name[prob].cosine - 1 / np.sqrt(1 + 0.4 ** 2)) < 1e-6
    assert all(s.measure == "cosine" for n, s in by_name.items() if n != prob)
    close = {**outs, prob: outs[prob] * (1 + 1e-4)}  # within fp16's 0.999 (an error up to 4.5 %)
    assert compare_with_reference(silero, feeds, close, DEFAULT_THRESHOLDS["fp16"]).passed
