"""`trtconv rewrite` end to end: exit codes, JSON schema, atomic output, external data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from builders import audio_conv_model
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode
from trtconv.load import load_model, save_model
from trtconv.reference.ort import run_model

F = TensorProto.FLOAT


def mmcv_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32), "weight")
    node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"], ["dcn"], name="dcn0",
                            domain="mmcv", stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1,
                            deform_groups=1)
    relu = helper.make_node("Relu", ["dcn"], ["y"], name="relu")
    g = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", F, [1, 2, 5, 7]),
                                              helper.make_tensor_value_info("offset", F, [1, 18, 5, 7]),
                                              helper.make_tensor_value_info("mask", F, [1, 9, 5, 7])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mmcv", 1)],
                                ir_version=8), path)
    return path


def invoke(*args: str):
    return CliRunner().invoke(cli, ["rewrite", *map(str, args)])


def test_rewrite_json_report_schema(tmp_path):
    src = mmcv_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    r = invoke(src, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "trtconv.rewrite/1"
    assert set(doc) == {"schema", "settings", "rewrites", "cleanups", "graph_proof", "drift", "dtype_changes",
                        "summary", "notes", "input", "output", "stepped_aside"}
    assert doc["stepped_aside"] == [] and doc["settings"]["step_aside"] is False  # `rewrite` is strict
    assert doc["drift"] is None and doc["dtype_changes"] == []  # an exact rewrite of a float32 model
    rw = doc["rewrites"][0]
    assert rw["node"] == "dcn0" and rw["rule"] == "dcnv2-mmcv" and rw["target"] == "deformconv"
    assert rw["before"]["op"] == "mmcv::MMCVModulatedDeformConv2d"
    assert [a["op"] for a in rw["after"]] == ["DeformConv"]
    assert rw["proof"]["passed"] and rw["proof"]["method"] == "onnxruntime"
    assert rw["proof"]["outputs"][0]["max_abs"] <= 1e-5
    assert doc["summary"]["opset_after"] == 19 and doc["summary"]["rewritten"] == 1
    assert doc["graph_proof"]["passed"]
    assert load_model(out).opsets == {"ai.onnx": 19}


def test_rewrite_human_output_and_existing_output(tmp_path):
    src = mmcv_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    r = invoke(src, "-o", out, "--dcn-target", "trt-plugin")
    assert r.exit_code == 0, r.output
    assert "dcnv2-mmcv" in r.stdout and "ModulatedDeformConv2d" in r.stdout and "passed" in r.stdout
    r2 = invoke(src, "-o", out)
    assert r2.exit_code == 2 and "already exists" in r2.output


def test_failed_proof_exits_7_and_writes_nothing(tmp_path):
    src = mmcv_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    r = invoke(src, "-o", out, "--tolerance", "1e-12")
    assert r.exit_code == 7
    assert "rewrite proof failed" in r.output
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp files left either


def test_bad_plugin_map_and_flags_exit_2(tmp_path):
    src = mmcv_model(tmp_path / "m.onnx")
    bad = tmp_path / "map.yaml"
    bad.write_text("version: 1\nops:\n  - op_type: X\n")
    r = invoke(src, "-o", tmp_path / "o.onnx", "--plugin-map", bad)
    assert r.exit_code == 2 and "ops[0].plugin" in r.output
    r = invoke(src, "-o", tmp_path / "o.onnx", "--fold-limit", "lots")
    assert r.exit_code == 2 and "bad size" in r.output
    r = invoke(src, "-o", tmp_path / "o.onnx", "--shapes", "nope:1x2")
    assert r.exit_code == 2


def test_invalid_model_exit_3(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx at all")
    r = invoke(bad, "-o", tmp_path / "o.onnx")
    assert r.exit_code == 3


def test_external_data_kept(tmp_path):
    """A model that arrives with external data leaves with external data, and computes the same."""
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4096])],
                                            [helper.make_tensor_value_info("y", F, [4096])], initializer=[w]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = save_model(m, tmp_path / "ext.onnx", external_data=True)
    out = tmp_path / "out.onnx"
    r = invoke(src, "-o", out)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out.onnx.data").is_file() and load_model(out).external_refs
    x = {"x": np.ones(4096, np.float32)}
    assert np.array_equal(run_model(out, x)["y"], run_model(src, x)["y"])


def test_check_accepts_what_rewrite_wrote(tmp_path):
    """`trtconv check` (stage 2) says the rewritten model parses: exit 4 before, 0 after."""
    src = mmcv_model(tmp_path / "m.onnx")
    before = CliRunner().invoke(cli, ["check", str(src), "--trt", "11.4"])
    assert before.exit_code == 4, before.output
    out = tmp_path / "out.onnx"
    assert invoke(src, "-o", out).exit_code == 0
    after = CliRunner().invoke(cli, ["check", str(out), "--json", "--trt", "11.4"])
    assert after.exit_code == 0, after.output
    plug = tmp_path / "plug.onnx"
    assert invoke(src, "-o", plug, "--dcn-target", "trt-plugin").exit_code == 0
    doc = json.loads(CliRunner().invoke(cli, ["check", str(plug), "--json", "--trt", "11.4"]).stdout)
    rules = {f["rule"] for n in doc["nodes"] for f in n["findings"]}
    assert "plugin-version" not in rules and doc["summary"]["unsupported"] == 0


def test_silero_shapes_that_break_an_if_branch_are_refused_not_written(silero, tmp_path):
    """Silero VAD's 8 kHz branch cannot take 576 samples; ONNX Runtime type-checks that branch at
    static shapes and refuses the model. rewrite says so (not "changed the outputs"), writes
    nothing, and the same holds with folding and proofs off: no exit 0 with an unloadable model."""
    import onnxruntime

    out = tmp_path / "s.onnx"
    for extra in ((), ("--no-fold",), ("--no-fold", "--no-verify")):
        res = invoke(silero, "-o", out, "--shapes", "input:1x576,state:2x1x128", *extra)
        assert res.exit_code == 2, (extra, res.output)
        assert "with --shapes input:1x576,state:2x1x128 the model does not load in ONNX Runtime" in res.stderr
        assert "changed the model's outputs" not in res.stderr
        assert not out.exists() and list(tmp_path.iterdir()) == []
    # What the hint says (leave the input dynamic) works, and ONNX Runtime loads the result as a user would.
    res = invoke(silero, "-o", out, "--shapes", "state:2x1x128")
    assert res.exit_code == 0, res.output
    onnxruntime.InferenceSession(str(out))


def test_rewrite_never_returns_a_model_onnx_runtime_refuses(silero):
    """The library path too, proofs off: the load check is not part of the proof."""
    import pytest

    from trtconv.errors import UsageError
    from trtconv.rewrites import RewriteSettings, rewrite

    with pytest.raises(UsageError, match="does not load in ONNX Runtime"):
        rewrite(load_model(silero), RewriteSettings(shapes={"input": (1, 576)}, verify=False, fold_constants=False))


def test_a_skipped_graph_proof_says_so_once_and_names_every_dynamic_input(tmp_path):
    """Seen on a GPT-2 export: `graph proof: graph proof skipped: input 'input_ids' has dynamic dims
    [...]` (the words twice, and nothing said what would let it run). Now: `graph proof: skipped: ...;
    give a concrete shape, e.g. --shapes ids:NxN,mask:NxN`, every open input named."""
    one = numpy_helper.from_array(np.ones((1, 4), np.float32), "one")
    g = helper.make_graph(
        [helper.make_node("Add", ["one", "one"], ["two"]), helper.make_node("Add", ["ids", "two"], ["s"]),
         helper.make_node("Mul", ["s", "mask"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.FLOAT, ["b", 4]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], [one])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    res = invoke(str(model), "-o", str(tmp_path / "out.onnx"))
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "graph proof:" in x)
    assert "graph proof skipped" not in line, line
    assert line.strip().startswith("graph proof: skipped: input 'ids' has dynamic dims"), line
    assert line.endswith("--shapes ids:Nx4,mask:Nx4"), line


def test_an_ir3_model_stays_valid_onnx_after_the_rewrite(tmp_path):
    """Seen on the ONNX test suite's light_inception_v2 (IR 3, every initializer a graph input, as IR 3
    wants): the rewrite's export listed no initializer as an input but kept IR 3, so onnx.checker
    refused the output ("in initializer but not in graph input") and INT8's opset upgrade failed on it
    (`build --precision int8`: exit 5, "Input ... is undefined")."""
    w = numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Add", ["w", "w"], ["ww"]), helper.make_node("Mul", ["x", "ww"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], ir_version=3), model)
    onnx.checker.check_model(onnx.load(model))  # a valid IR 3 model
    res = invoke(str(model), "-o", str(tmp_path / "out.onnx"))
    assert res.exit_code == 0, res.output
    out = onnx.load(tmp_path / "out.onnx")
    onnx.checker.check_model(out)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_array_equal(run_model(out, {"x": x})["y"], x * 4)


def test_shapes_the_graph_cannot_run_at_are_refused_and_nothing_written(tmp_path):
    """A 1-D convolution of kernel 8 over [1, 1, n]: --shapes x:1x1x4 leaves it no output (an audio front end given
    fewer samples than its window). The model written would declare a shape it cannot take: exit 2, as build's
    pre-flight says, and nothing written; a size it runs at is fine."""
    model = audio_conv_model(tmp_path / "audio.onnx", kernel=8)
    out = tmp_path / "out.onnx"
    res = CliRunner().invoke(cli, ["rewrite", str(model), "-o", str(out), "--shapes", "x:1x1x4"])
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "the graph cannot run at --shapes x:1x1x4" in res.stderr and "'window' (Conv)" in res.stderr, res.stderr
    assert not out.exists()
    ok = CliRunner().invoke(cli, ["rewrite", str(model), "-o", str(out), "--shapes", "x:1x1x64"])
    assert ok.exit_code == ExitCode.OK and out.exists(), ok.output
