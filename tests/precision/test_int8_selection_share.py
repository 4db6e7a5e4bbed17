"""Auto-exclude's search asked every selection sample to meet the limit, which is stricter than the pass itself
(a share of new samples, judged on the judging part). Where no candidate within ``--min-precision-share`` met
that, the command refused with exit 8 ("INT8 needs more than N layers excluded") although the model met the
limit on nearly every input: on magika 13 of 14 such refusals were contradicted by the unseen half. Now the
fewest exclusions whose candidate meets the limit on at least the claim's share of the selection samples is
judged like any other; the judging part, which nothing that chooses reads, still decides."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.pipeline.quantize import QuantizeSettings, int8_parts
from trtconv.precision.int8.accuracy import with_origin
from trtconv.samples import SampleSet, SampleSource, model_inputs


def _model(path: Path) -> onnx.ModelProto:
    w = np.random.default_rng(1).normal(size=(64, 16)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return model


def test_a_model_meeting_the_limit_on_the_claims_share_of_selection_is_judged_not_refused(tmp_path):
    model = _model(tmp_path / "m.onnx")
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(120):  # each file its own source
        np.save(data / f"{i:03d}.npy", rng.normal(size=(1, 64)).astype(np.float32))
    parts = int8_parts(SampleSet(SampleSource.detect(data), model_inputs(model)),
                       QuantizeSettings(precision="int8", calib_data=data))
    assert parts.selection is not None and len(parts.selection) == 24
    # one selection sample so faint that INT8 rounds all of it to zero (cosine 0): with no layer the share lets out
    # (--min-precision-share 1), no candidate meets the limit on every selection sample
    faint, _ = next(iter(with_origin(parts.selection, "sample")))
    np.save(faint, (np.load(faint) * 1e-4).astype(np.float32))
    res = CliRunner().invoke(cli, ["quantize", str(tmp_path / "m.onnx"), "--precision", "int8", "--calib-data",
                                   str(data), "-o", str(tmp_path / "q.onnx"), "--min-precision-share", "1", "--json"])
    assert res.exit_code == ExitCode.OK, res.output  # was exit 8
    doc = json.loads(res.stdout)
    assert doc["int8"]["selection_share"] == {"meeting": 23, "samples": 24}
    assert doc["int8_share"] == 1.0 and doc["claim"]["judged"] == 48 and doc["claim"]["meeting"] == 48
    assert doc["verdict"].startswith("passed on n=48 judged samples"), doc["verdict"]
    text = CliRunner().invoke(cli, ["quantize", str(tmp_path / "m.onnx"), "--precision", "int8", "--calib-data",
                                    str(data), "-o", str(tmp_path / "q.onnx"), "--min-precision-share", "1", "--force"])
    assert text.exit_code == ExitCode.OK, text.output
    assert "the one judged met it on 23 of 24 (at least the share a pass promises)" in text.stdout, text.stdout
    # a faint sample in the judging part too: the judgement, which no choice saw, refuses the claim (exit 11)
    judged, _ = next(iter(with_origin(parts.judging, "sample")))
    np.save(judged, (np.load(judged) * 1e-4).astype(np.float32))
    res = CliRunner().invoke(cli, ["quantize", str(tmp_path / "m.onnx"), "--precision", "int8", "--calib-data",
                                   str(data), "-o", str(tmp_path / "q2.onnx"), "--min-precision-share", "1"])
    assert res.exit_code == ExitCode.BAD_DATA and "1 of them below the limit" in res.stderr, res.output
    assert not (tmp_path / "q2.onnx").exists()
