"""`trtconv inspect` on real TensorRT-RTX engines built here (no GPU): the layer table the manifest
recorded from the strongly typed network, the INT8/FP16 layers against what the precision stage
meant, `build --layers`, and the identity refusal."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

MAC = {"Convolution", "Matrix_Multiply"}


def _run(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def int8_engine(rec_int8_rtx) -> tuple[Path, str]:
    """PP-OCR's recognizer, INT8 (trtconv's Q/DQ, FP16 remainder), an RTX engine built on the CPU with
    --layers: the session's (tests/conftest.py rec_int8_rtx)."""
    engine, code, out, _, _ = rec_int8_rtx
    assert code == 0, out
    return engine, out


def _dq_fed_nodes(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """(MAC nodes fed by a DequantizeLinear: meant to run INT8, MAC nodes fed by none)."""
    dq_out = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized, plain = set(), set()
    for n in model.graph.node:
        if n.op_type in ("Conv", "MatMul", "Gemm"):
            (quantized if any(i in dq_out for i in n.input) else plain).add(n.name)
    return quantized, plain


def test_inspect_json_lists_every_layer_of_an_rtx_int8_engine_with_the_intended_precision(int8_engine):
    engine, _ = int8_engine
    code, out = _run("inspect", engine, "--json")
    assert code == 0, out
    report = json.loads(out)
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    rows = report["layers"]["rows"]
    assert report["layers"]["from"] == "manifest" and report["layers"]["recorded_from"] == "network"
    assert "strongly typed network" in report["layers"]["note"]
    assert len(rows) == len(manifest["layers"]["layers"]) > 100
    assert all({"name", "type", "precision", "inputs", "outputs"} <= set(r) for r in rows)
    assert report["requires"]["tensorrt_flavour"] == "TensorRT-RTX"
    assert report["provenance"]["identity"] == manifest["identity"]["hash"]
    assert [b["name"] for b in report["bindings"] if b["mode"] == "input"] == ["x"]

    # What the precision stage meant, read from the prepared ONNX it wrote: every Conv/MatMul fed
    # by a DequantizeLinear is INT8 in the engine's table, every other one FP16 (the remainder) or FP32.
    quantized, plain = _dq_fed_nodes(onnx.load(str(engine.with_name("rec.prepared.onnx")), load_external_data=False))
    assert len(quantized) > 10 and plain
    by_name = {r["name"]: r for r in rows}
    macs = [r for r in rows if r["type"] in MAC]
    assert {r["name"] for r in macs} <= quantized | plain | set(by_name)
    for node in quantized:
        assert by_name[node]["precision"] == "int8", by_name[node]
    for node in plain:
        assert by_name[node]["precision"] in ("fp16", "fp32"), by_name[node]
    # and the report's own view agrees: the placed nodes are the INT8 ones
    placed = {p["node"] for p in manifest["precision"]["report"]["placed"]}
    assert quantized <= placed


def test_build_layers_names_the_layers_that_missed_int8_with_the_reason(int8_engine):
    engine, out = int8_engine
    report = json.loads(_run("inspect", engine, "--json")[1])
    off = report["off_precision"]
    assert off, "the recognizer keeps some matrix products out of INT8"
    assert f"{len(off)} compute layer(s) not in int8:" in out
    first = off[0]
    assert f"{first['name']} ({first['type']}): {first['precision']}" in out
    assert all(r["reason"] for r in off)  # each one a node the precision stage decided to keep out


def test_inspect_refuses_an_engine_that_is_not_the_one_its_manifest_describes(int8_engine, tmp_path):
    engine, _ = int8_engine
    copy = tmp_path / "rec.engine"
    data = bytearray(engine.read_bytes())
    data[-1] ^= 0xFF
    copy.write_bytes(bytes(data))
    Path(str(copy) + ".json").write_text(Path(str(engine) + ".json").read_text())
    code, out = _run("inspect", copy)
    assert code == ExitCode.INVALID_MODEL, out
    assert "not the engine its manifest describes" in out

    copy.write_bytes(engine.read_bytes())
    manifest = json.loads(Path(str(engine) + ".json").read_text())
    manifest["identity"]["material"]["settings"]["precision"] = "fp16"
    Path(str(copy) + ".json").write_text(json.dumps(manifest))
    code, out = _run("inspect", copy)
    assert code == ExitCode.INVALID_MODEL, out
    assert "the manifest was edited" in out


def test_an_engine_its_manifest_refuses_gets_the_command_that_rebuilds_it(tmp_path, monkeypatch):
    """The identity refusal's hint was "rebuild it with `trtconv build`": not a command. The manifest now records
    the command that built it (shape flags included), and the hint is that command with --force, which runs as
    printed from where the build ran and gives an engine `inspect` takes."""
    import shlex

    from onnx import TensorProto, helper

    monkeypatch.chdir(tmp_path)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "m.onnx")
    code, out = _run("build", "m.onnx", "-o", "m.engine", "--trt", "rtx", "--shapes", "x:2x4")
    assert code == 0, out
    recorded = json.loads(Path("m.engine.json").read_text())["build"]["command"]
    assert "--shapes x:2x4" in recorded and "--trt rtx" in recorded, recorded
    Path("m.engine").write_bytes(Path("m.engine").read_bytes() + b"\0")
    code, out = _run("inspect", "m.engine")
    assert code == ExitCode.INVALID_MODEL, out
    hint = next(line for line in out.splitlines() if line.strip().startswith("hint:"))
    command = hint.split("`")[1]
    assert command == recorded + " --force", hint
    code, out = _run(*shlex.split(command)[1:])
    assert code == 0, out
    assert _run("inspect", "m.engine")[0] == 0
