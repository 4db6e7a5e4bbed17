"""`trtconv build --trt rtx --split-tail` with the real TensorRT-RTX builder: the engine for the part
RTX runs, the ONNX tail beside it, the manifest saying so; without the flag, exit 5 and a hint that
runs as printed; a failed build leaves neither engine nor tail; TensorRT 10/11 split nothing."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import file_sha256
from trtconv.reference import run, session

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tail_models import nms_model, nonzero_model  # noqa: E402


def _build(*args: object):
    return CliRunner().invoke(cli, ["build", *(str(a) for a in args)])


def _tail_run(folder: Path, stem: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """What docs/build.md's snippet does, with the prepared ONNX (the engine's graph) on ONNX Runtime in
    the engine's place (RTX engines run only on RTX GPUs): engine outputs, then the tail on them."""
    head = run(session(folder / f"{stem}.prepared.onnx"), {"x": x})
    tail = session(folder / f"{stem}.tail.onnx")
    feeds = {i.name: head[i.name] if i.name in head else {"x": x}[i.name] for i in tail.get_inputs()}
    return {**head, **run(tail, feeds)}


@pytest.mark.parametrize("make, at", [(nms_model, "nms (NonMaxSuppression)"), (nonzero_model, "nonzero (NonZero)")])
def test_split_tail_builds_the_engine_and_writes_the_proven_tail(tmp_path, make, at):
    model = make(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    res = _build(model, "--trt", "rtx", "-o", out / "m.engine", "--split-tail", "--json")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["m.engine", "m.engine.json", "m.prepared.onnx",
                                                      "m.tail.onnx"]
    report = json.loads(res.stdout)
    assert report["tail_onnx"] == str(out / "m.tail.onnx")
    (stage,) = [s for s in report["stages"] if s["name"] == "split"]
    assert stage["status"] == "done" and stage["at"] == [at] and stage["proof"]["passed"]
    manifest = json.loads((out / "m.engine.json").read_text())
    split = manifest["split"]
    assert split["tail"] == {"file": "m.tail.onnx", "sha256": file_sha256(out / "m.tail.onnx")}
    assert split["at"] == [at] and split["proof"]["passed"] is True and split["proof"]["max_abs"] == 0.0
    assert split["proof"]["method"] == "onnxruntime" and split["proof"]["inputs"].startswith("seeded random")
    cut = {c["name"]: c for c in split["cut"]}
    engine_outputs = {b["name"] for b in manifest["bindings"] if b["mode"] == "output"}
    assert {n for n, c in cut.items() if c["source"] == "head"} <= engine_outputs  # the engine computes the cut
    assert all(c["dtype"] == "float32" and c["shape"] for c in cut.values())
    assert set(split["engine_outputs"]) <= engine_outputs
    assert not {n.op_type for n in onnx.load(out / "m.prepared.onnx").graph.node} & {"NonZero", "NonMaxSuppression"}
    # the composition, run as the docs show, gives the model's outputs
    dims = [d.dim_value for d in onnx.load(model).graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    want = run(session(model), {"x": x})
    got = _tail_run(out, "m", x)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    human = _build(model, "--trt", "rtx", "-o", tmp_path / "h.engine", "--split-tail")
    assert human.exit_code == 0, human.output
    assert f"tail written to {tmp_path / 'h.tail.onnx'}" in human.stdout and "max abs 0" in human.stdout


def test_without_the_flag_exit_5_and_the_hint_runs_as_printed(tmp_path):
    model = nms_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    res = _build(model, "--trt", "rtx", "-o", out / "m.engine")
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert list(out.iterdir()) == []
    hint = next(line for line in res.stderr.splitlines() if line.strip().startswith("hint:"))
    assert "--split-tail" in hint and "NonMaxSuppression cannot run on TensorRT-RTX" in hint
    command = hint.split("`")[1]
    argv = shlex.split(command)
    assert argv[:2] == ["trtconv", "build"] and argv[-1] == "--split-tail"
    again = CliRunner().invoke(cli, argv[1:])
    assert again.exit_code == 0, again.output
    assert (out / "m.engine").exists() and (out / "m.tail.onnx").exists()


def test_a_failed_split_build_leaves_neither_engine_nor_tail(tmp_path):
    """The builder's precision check fails (exit 8) after the tail was written: both go."""
    model = nms_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    res = _build(model, "--trt", "rtx", "-o", out / "m.engine", "--split-tail", "--precision", "fp16",
                 "--exclude-op", "Conv", "--json")
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    report = json.loads(res.stdout)
    assert {s["name"]: s["status"] for s in report["stages"]}["split"] == "done"
    assert list(out.iterdir()) == [] and report["tail_onnx"] is None and report["engine"] is None


def test_keep_prepared_keeps_the_tail_with_the_head(tmp_path):
    model = nms_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    res = _build(model, "--trt", "rtx", "-o", out / "m.engine", "--split-tail", "--precision", "fp16",
                 "--exclude-op", "Conv", "--keep-prepared")
    assert res.exit_code == ExitCode.PRECISION_NOT_ACHIEVED, res.output
    assert sorted(p.name for p in out.iterdir()) == ["m.prepared.onnx", "m.tail.onnx"]


def test_tensorrt_11_splits_nothing_and_says_so(tmp_path):
    model = nonzero_model(tmp_path / "m.onnx")
    res = _build(model, "--trt", "11.4", "-o", tmp_path / "m.engine", "--split-tail", "--prepare-only", "--json")
    assert res.exit_code == 0, res.output
    (stage,) = [s for s in json.loads(res.stdout)["stages"] if s["name"] == "split"]
    assert stage["status"] == "skipped" and "runs NonZero and NonMaxSuppression natively" in stage["reason"]
    assert "--split-tail: TensorRT 11.4 runs NonZero and NonMaxSuppression natively" in res.stderr
    assert not (tmp_path / "m.tail.onnx").exists()
    assert any(n.op_type == "NonZero" for n in onnx.load(tmp_path / "m.prepared.onnx").graph.node)


def test_the_proof_runs_on_the_sample_data_when_given(tmp_path):
    model = nonzero_model(tmp_path / "m.onnx")
    data = tmp_path / "data"
    data.mkdir()
    x = np.array([[1, -1, 2, -2, 3, -3, 4, -4], [0, 5, 0, 6, 0, 7, 0, 8]], np.float32)
    np.savez(data / "000.npz", x=x)
    res = _build(model, "--trt", "rtx", "-o", tmp_path / "m.engine", "--split-tail", "--calib-data", data)
    assert res.exit_code == 0, res.output
    proof = json.loads((tmp_path / "m.engine.json").read_text())["split"]["proof"]
    assert proof["inputs"] == "the first sample of the sample data" and proof["passed"]
    assert {o["name"]: o["shape"] for o in proof["outputs"]} == {"positive": [8], "doubled": [2, 8]}  # 8 positives
