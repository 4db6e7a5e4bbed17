"""The pre-build corner run is never stricter than TensorRT (issue 26, item 2).

Synthetic inputs are valid for the graph they feed: integer inputs that index a table stay
within its rows; real samples are used when given; a failure of the values alone is a warning,
never an exit blamed on the shapes; ``--no-preflight`` skips the run. The BERT-like graph
(tests/textmodels.py) is built for real with TensorRT-RTX.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from textmodels import INPUTS, bert_like, shifted_index_model

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.onnxutil.indices import index_limits
from trtconv.plan.build_plan import InputRange, Profile
from trtconv.plan.corners import run_corners
from trtconv.reference.ort import random_feeds

STATIC = "--shapes", ",".join(f"{n}:1x8" for n in INPUTS)
DYNAMIC = ("--min-shapes", ",".join(f"{n}:1x4" for n in INPUTS), "--opt-shapes", ",".join(f"{n}:2x16" for n in INPUTS),
           "--max-shapes", ",".join(f"{n}:4x32" for n in INPUTS))


def _build(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["build", *[str(a) for a in args]])
    return res.exit_code, res.output


def test_index_limits_follow_the_input_to_the_table(tmp_path):
    model = onnx.load(bert_like(tmp_path / "bert.onnx"))
    assert index_limits(model) == {"input_ids": 50, "token_type_ids": 2}  # attention_mask indexes nothing
    feeds = random_feeds(model, {n: (4, 64) for n in INPUTS}, seed=3)
    assert set(np.unique(feeds["token_type_ids"])) == {0, 1}
    assert feeds["attention_mask"].max() == 3  # not a table index: the usual 0..3


def test_lengths_of_a_batch_get_lengths_its_sequences_can_have():
    """An integer [batch] input beside a float [batch, T, ...] one reads as the sequences' lengths: drawn
    from half to all of T (small integers mask almost everything: onnx-asr's WeSpeaker returns zeros).
    An input that indexes a table keeps the table's limit; a static [1] beside [1, T] is not matched."""
    from onnx import TensorProto, helper, numpy_helper

    from trtconv.onnxutil import length_inputs

    table = numpy_helper.from_array(np.zeros((5, 3), np.float32), "table")
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "speaker"], ["emb"]), helper.make_node("Identity", ["x"], ["y"]),
         helper.make_node("Identity", ["lens"], ["n"]), helper.make_node("Identity", ["fixed"], ["f"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 80]),
              helper.make_tensor_value_info("lens", TensorProto.INT64, ["B"]),
              helper.make_tensor_value_info("speaker", TensorProto.INT64, ["B"]),
              helper.make_tensor_value_info("fixed", TensorProto.INT32, [1]),
              helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 300])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT if n in ("y", "emb") else TensorProto.INT64, None)
         for n in ("y", "n", "emb")], initializer=[table])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert length_inputs(model) == {"lens": "x", "speaker": "x"}  # read off the dims; the table decides below
    feeds = random_feeds(model, {"x": (64, 500, 80), "lens": (64,), "speaker": (64,)}, seed=1)
    assert 250 <= feeds["lens"].min() and feeds["lens"].max() <= 500 and len(set(feeds["lens"].tolist())) > 1
    assert feeds["speaker"].max() < 4 and feeds["fixed"].max() < 4  # the table's rows (0..3 of 5); the usual 0..3


def test_random_data_draws_the_values_the_graph_takes(tmp_path):
    """`quantize --random-data` drew its integers 0..3 by its own code: BERT's token_type_ids into a 2-row embedding
    failed in ONNX Runtime ("indices element out of data bounds, idx=2", exit 11). It draws as the proofs do."""
    model = bert_like(tmp_path / "bert.onnx")
    res = CliRunner().invoke(cli, ["quantize", str(model), "--precision", "fp16", "--random-data", "8", "--shapes",
                                   STATIC[1], "-o", str(tmp_path / "bert.fp16.onnx")])
    assert res.exit_code == ExitCode.OK, res.output
    assert (tmp_path / "bert.fp16.onnx").stat().st_size > 1000


@pytest.mark.parametrize("shapes", [STATIC, DYNAMIC], ids=["static", "dynamic"])
def test_bert_like_model_builds_with_tensorrt_rtx(tmp_path, shapes):
    pytest.importorskip("tensorrt_rtx")
    model = bert_like(tmp_path / "bert.onnx")
    code, out = _build(model, "-o", tmp_path / "bert.engine", "--trt", "rtx", *shapes)
    assert code == ExitCode.OK, out
    assert (tmp_path / "bert.engine").stat().st_size > 10_000
    assert "synthetic input values" not in out  # the tokens were valid: nothing to warn about


def test_failure_of_synthetic_values_is_a_warning_not_an_exit(tmp_path):
    model = shifted_index_model(tmp_path / "shifted.onnx")
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "s.engine"), "--prepare-only", "--json"])
    assert res.exit_code == ExitCode.OK, res.output
    assert "failed on trtconv's synthetic input values, not on the shapes" in res.stderr
    doc = json.loads(res.stdout)
    (profiles,) = [s for s in doc["stages"] if s["name"] == "profiles"]
    assert "node 'lookup' (Gather) fails" in profiles["failed_on_synthetic_values"][0]


def test_real_samples_are_used_at_a_corner_of_their_shape(tmp_path):
    """Sample values the graph accepts (ids 0..2) are run as they are, where random ones fail."""
    model = onnx.load(shifted_index_model(tmp_path / "shifted.onnx"))
    sample = {"ids": np.array([[0, 1, 2, 2, 1, 0, 1, 2]], np.int64)}
    runs = run_corners(model, (), samples=[sample], keep_outputs=True)
    assert not runs.failures and not runs.value_failures
    ((feeds, _),) = runs.outputs.values()
    np.testing.assert_array_equal(feeds["ids"], sample["ids"])
    assert run_corners(model, ()).value_failures  # random 0..3: 3 + 1 is out of the table


def _fixed_reshape(tmp_path):
    """A Reshape to a fixed volume: it runs at x:1x8 only, whatever the values."""
    from onnx import TensorProto, helper, numpy_helper
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="fixed")], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=[shape])
    path = tmp_path / "reshape.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


RESHAPE_PROFILE = ("--min-shapes", "x:1x4", "--opt-shapes", "x:1x8", "--max-shapes", "x:1x16")


def test_a_build_not_verified_here_leaves_the_corners_to_the_builder(tmp_path):
    """TensorRT-RTX's engine is not run here (no verify): ONNX Runtime runs nothing before the build, and
    a corner the graph cannot take is the builder's own finding, exit 2 with the layer named; nothing
    is written (the builder alone only warns, and would write an engine failing at those shapes)."""
    pytest.importorskip("tensorrt_rtx")
    path = _fixed_reshape(tmp_path)
    res = CliRunner().invoke(cli, ["build", str(path), "-o", str(tmp_path / "r.engine"), "--trt", "rtx",
                                   *RESHAPE_PROFILE])
    assert res.exit_code == ExitCode.USAGE, res.output
    said = re.search(r"the graph cannot take the (min|max) shapes of the profile \(profile 0: x:1x(\d+)\): "
                     r"IShuffleLayer fixed: .*reshape would change volume (\d+) to 8", res.stderr)
    assert said and said.group(2) == said.group(3) == {"min": "4", "max": "16"}[said.group(1)], res.stderr
    assert "narrow the profile" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reshape.onnx"]
    ok = CliRunner().invoke(cli, ["build", str(path), "-o", str(tmp_path / "r.engine"), "--trt", "rtx", "--json",
                                  "--shapes", "x:1x8"])
    assert ok.exit_code == ExitCode.OK, ok.output
    (stage,) = [s for s in json.loads(ok.stdout)["stages"] if s["name"] == "profiles"]
    assert stage["status"] == "skipped" and "the builder checks every profile corner" in stage["reason"]


def test_an_rtx_build_with_nothing_to_rewrite_never_starts_onnx_runtime(tmp_path):
    """Nothing rewritten, nothing verified here: no graph proof, no corner run, so ONNX Runtime is never
    imported (a fresh interpreter: the test process has it loaded already)."""
    pytest.importorskip("tensorrt_rtx")
    path = _fixed_reshape(tmp_path)
    code = ("import sys; from trtconv.cli.main import main; sys.argv = ['trtconv', 'build', sys.argv[1], '-o', "
            "sys.argv[2], '--trt', 'rtx', '--shapes', 'x:1x8']\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint('onnxruntime' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "r.engine")], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == "False", res.stdout + res.stderr
    assert (tmp_path / "r.engine").is_file()


def test_a_shape_the_graph_cannot_run_still_fails_and_names_the_skip(tmp_path):
    """With no builder after it (--prepare-only) the corners run on ONNX Runtime: exit 2, and
    the hint names --no-preflight; with it, the corner run is skipped (the stage says so)."""
    path = _fixed_reshape(tmp_path)
    profile = RESHAPE_PROFILE
    code, out = _build(path, "-o", tmp_path / "r.engine", "--prepare-only", *profile)
    assert code == ExitCode.USAGE, out
    assert "profile 0 min shapes (x:1x4): node 'fixed' (Reshape) fails" in out and "--no-preflight" in out
    res = CliRunner().invoke(cli, ["build", str(path), "-o", str(tmp_path / "r.engine"), "--prepare-only",
                                   "--no-preflight", "--json", "--force", *profile])
    assert res.exit_code == ExitCode.OK, res.output
    (stage,) = [s for s in json.loads(res.stdout)["stages"] if s["name"] == "profiles"]
    assert stage["status"] == "skipped" and stage["reason"] == "--no-preflight"


def test_profile_corner_of_a_token_table_runs(tmp_path):
    model = onnx.load(bert_like(tmp_path / "bert.onnx"))
    profile = Profile(tuple((n, InputRange((1, 4), (2, 16), (4, 32))) for n in INPUTS))
    runs = run_corners(model, (profile,), seed=7)
    assert runs.failures == () and runs.value_failures == ()


def test_build_runs_the_corners_on_the_given_samples(tmp_path):
    """With --calib-data the corner runs on the real sample of its shape: valid ids, no warning."""
    model = shifted_index_model(tmp_path / "shifted.onnx")
    data = tmp_path / "ids.npz"
    np.savez(data, ids=np.array([[0, 1, 2, 2, 1, 0, 1, 2]], np.int64))
    res = CliRunner().invoke(cli, ["build", str(model), "-o", str(tmp_path / "s.engine"), "--prepare-only",
                                   "--calib-data", str(data), "--json"])
    assert res.exit_code == ExitCode.OK, res.output
    assert "synthetic input values" not in res.stderr
    (profiles,) = [s for s in json.loads(res.stdout)["stages"] if s["name"] == "profiles"]
    assert profiles["failed_on_synthetic_values"] == []
