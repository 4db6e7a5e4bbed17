"""A model that builds only once a static profile's shapes are folded in (Silero VAD's
silero_vad_half: its LSTM sits in an If on a shape-only condition, which the RTX builder cannot
build at run time) builds with ONE `trtconv build --trt rtx --shapes ...`, as `rewrite --shapes`
then `build` did: the check after the shape-aware folding decides. A dynamic profile cannot fold
the condition: build still refuses it at once (exit 5)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from realmodels import silero_model

from trtconv.analyze import analyze
from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import load_model

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

SHAPES = "input:1x576,state:2x1x128"


def _half() -> Path:
    path = silero_model("silero_vad_half.onnx")
    if not path.is_file():
        pytest.skip("silero-vad's silero_vad_half.onnx is not installed")
    return path


def test_a_static_profile_that_needs_folding_builds_in_one_command(tmp_path):
    engine = tmp_path / "vad.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(_half()), "--shapes", SHAPES, "-o", str(engine),
                                   "--keep-prepared", "--json"])
    assert res.exit_code == 0, res.output
    assert engine.stat().st_size > 10_000
    doc = json.loads(res.stdout)
    (check,) = [s for s in doc["stages"] if s["name"] == "check"]
    assert check["verdict"] == "supported" and "folded with the shapes" in check["folded"]
    prepared = tmp_path / "vad.prepared.onnx"
    report = analyze(load_model(prepared), "rtx")  # the LSTMs' If conditions are constants in what was built
    assert report.verdict == "supported" and not [n for n in report.nodes if n.status != "supported"]
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(str(prepared)).graph.input}
    assert dims["input"] == [1, 576]


def test_a_dynamic_profile_is_still_refused_at_the_check(tmp_path):
    engine = tmp_path / "vad.engine"
    res = CliRunner().invoke(cli, ["build", "--trt", "rtx", str(_half()), "-o", str(engine), "--min-shapes",
                                   "input:1x512,state:2x1x128", "--opt-shapes", SHAPES, "--max-shapes",
                                   "input:1x1024,state:2x1x128"])
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "rnn" in res.output.lower() or "LSTM" in res.output
    assert not engine.exists()


def test_check_with_the_same_shapes_says_what_build_does(tmp_path):
    """`check --trt rtx --shapes S` said UNSUPPORTED (exit 5) on the model `build --trt rtx --shapes S` builds:
    check judged the graph as it is only. With --shapes fixing every input it now also judges the graph folded
    with them, as build does: exit 4 (the folding is a rewrite build does itself), said in the summary line and
    in --json; without --shapes the verdict is the model's as it is (exit 5)."""
    res = CliRunner().invoke(cli, ["check", "--trt", "rtx", str(_half()), "--shapes", SHAPES, "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == ExitCode.NEEDS_REWRITE, res.output
    assert doc["verdict"] == "needs-rewrite" and doc["folded"] == {"verdict": "supported"}
    assert doc["summary"]["unsupported"] == 2  # the nodes as they are, still listed with their reasons
    text = CliRunner().invoke(cli, ["check", "--trt", "rtx", str(_half()), "--shapes", SHAPES]).stdout
    assert "folded with these --shapes (`build --shapes` folds it itself): supported" in text.splitlines()[-1]
    bare = CliRunner().invoke(cli, ["check", "--trt", "rtx", str(_half()), "--json"])
    assert bare.exit_code == ExitCode.UNSUPPORTED and json.loads(bare.stdout)["folded"] is None
