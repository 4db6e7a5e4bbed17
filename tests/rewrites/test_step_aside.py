"""A rewrite that fails steps aside (issue 33), and the proofs' one prologue: with
``RewriteSettings.step_aside`` (what ``build`` sets) a rule whose node proof fails or cannot run is
dropped for that node, a clean-up whose graph proof fails is turned off, and the report says so;
without it (``trtconv rewrite``) a failed proof is still an error."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import ms_gelu_model
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import AccuracyError
from trtconv.reference import run, session
from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.proof import Original, OriginalDidNotRun, run_original

ROOT = Path(__file__).parents[2]


def _gelu(tmp_path: Path, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    return onnx.load(ms_gelu_model(tmp_path / "g.onnx", dtype))


def test_a_failed_node_proof_steps_aside_and_leaves_the_node(tmp_path):
    model = _gelu(tmp_path)
    with pytest.raises(AccuracyError, match=r"node 'gelu0' \(ms-gelu -> .*\): max abs error"):
        rewrite(model, RewriteSettings(node_tolerance=1e-12))  # strict: `trtconv rewrite`
    res = rewrite(model, RewriteSettings(node_tolerance=1e-12, step_aside=True))
    assert not res.report.rewrites
    [aside] = res.report.stepped_aside
    assert (aside.node, aside.op, aside.rule) == ("gelu0", "Gelu", "ms-gelu")
    assert re.fullmatch(r"max abs error [0-9.e-]+ > [0-9.e-]+", aside.reason)
    assert [(n.domain, n.op_type) for n in res.model.graph.node] == [("com.microsoft", "Gelu")]
    doc = res.report.to_json()
    assert doc["stepped_aside"] == [aside.to_json()] and doc["settings"]["step_aside"] is True
    assert "gelu0" in res.report.to_text() and "stepped aside" in res.report.to_text()
    assert rewrite(model, RewriteSettings(step_aside=True)).report.rewrites  # at the default tolerance it stays


def test_a_proof_that_cannot_run_steps_aside(tmp_path):
    """bfloat16 Gelu: the proof cannot even set itself up; strict, that is a bug to report (it raises)."""
    model = _gelu(tmp_path, TensorProto.BFLOAT16)
    res = rewrite(model, RewriteSettings(step_aside=True))
    [aside] = res.report.stepped_aside
    assert aside.rule == "ms-gelu" and aside.reason.startswith("the proof could not run: ")
    assert [n.op_type for n in res.model.graph.node] == ["Gelu"] and res.model.graph.node[0].domain == "com.microsoft"


def test_a_failed_graph_proof_drops_the_rewrites_that_made_it_fail(tmp_path):
    """The node proof passes (1e-5), the whole-graph proof (1e-12) does not: clean-ups off change nothing,
    the ms-gelu rewrite off leaves the graph unchanged, which is proven identical."""
    model = _gelu(tmp_path)
    tight = RewriteSettings(graph_tolerance=1e-12)
    with pytest.raises(AccuracyError, match="rewrite changed the model's outputs"):
        rewrite(model, tight)
    res = rewrite(model, RewriteSettings(graph_tolerance=1e-12, step_aside=True))
    [aside] = res.report.stepped_aside
    assert (aside.node, aside.rule) == ("gelu0", "ms-gelu") and "whole-graph proof failed" in aside.reason
    assert res.report.graph_proof.method == "identical" and res.report.settings.int64_to_int32  # clean-ups kept


def _onehot() -> onnx.ModelProto:
    """OneHot(11) of constant int64 indices, int64 depth and float values, added to an input."""
    inits = [numpy_helper.from_array(np.array([0, 2, 1], np.int64), "idx"),
             numpy_helper.from_array(np.array(4, np.int64), "depth"),
             numpy_helper.from_array(np.array([0, 1], np.float32), "vals")]
    nodes = [helper.make_node("OneHot", ["idx", "depth", "vals"], ["oh"], name="onehot0"),
             helper.make_node("Add", ["x", "oh"], ["y"], name="add0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_no_clean_up_leaves_a_node_onnx_runtime_cannot_run_where_the_original_could():
    """ONNX Runtime has no OneHot kernel for int32 indices with an int64 depth and float values: the
    result of the build's rewrite runs wherever the original did, with the same outputs (the int32
    clean-up steps aside there, or, since it skips OneHot, does not narrow that input)."""
    model = _onehot()
    res = rewrite(model, RewriteSettings(fold_constants=False, step_aside=True))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(session(res.model), {"x": x})["y"], run(session(model), {"x": x})["y"])
    if any(a.rule == "int64-to-int32" for a in res.report.stepped_aside):
        assert not res.report.settings.int64_to_int32
        assert "does not load in ONNX Runtime" in res.report.stepped_aside[0].reason


def test_the_prologue_raises_one_error_with_the_reason():
    """One prologue runs every rule's original: a model ONNX Runtime cannot run is OriginalDidNotRun,
    which the driver records as a failed proof of method "none"."""
    model = _onehot()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([0, 2, 1], np.int32), "idx"))  # no kernel
    with pytest.raises(OriginalDidNotRun, match="the original did not run in ONNX Runtime: .*OneHot") as err:
        run_original(model, {"x": np.zeros((3, 4), np.float32)}, ["y"])
    assert err.value.proof.method == "none" and not err.value.proof.passed
    original = Original((model.graph.node[0],), {"idx": np.array([0, 2, 1], np.int32),
                                                 "depth": np.array(4, np.int64), "vals": np.array([0, 1], np.float32)})
    with pytest.raises(OriginalDidNotRun):
        original.run({}, "oh", 13)


def test_no_rule_runs_its_original_with_a_prologue_of_its_own():
    """The prologue is written once (proof.run_original): no rule family catches its original's failure."""
    own = []
    for path in sorted((ROOT / "trtconv" / "rewrites").glob("*/*.py")):
        text = path.read_text()
        if "did not run in ONNX Runtime" in text or "cannot run the original" in text or "except TrtconvError" in text:
            own.append(path.relative_to(ROOT).as_posix())
    assert own == []
