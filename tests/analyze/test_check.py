"""Stage 2, analyze: per-node support rules on small graphs (one golden per restriction) and real models."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from trtconv.analyze import analyze, available_versions, load_table
from trtconv.analyze.maketables import DEFAULT_SOURCE, build_table, render
from trtconv.analyze.rules import GENERIC_RULES, RULES
from trtconv.errors import ExitCode, InvalidModelError, UsageError
from trtconv.load import load_model
from trtconv.rewrites.catalog import rewrite_rule_for

FACTS_TSV = DEFAULT_SOURCE  # the 10.15 parser table, in the repository
F = TensorProto.FLOAT


def vi(name: str, dtype: int = F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(tmp_path: Path, nodes, inputs, outputs, inits=(), opset: int = 17, extra_opsets=(), name="m.onnx") -> Path:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    path = tmp_path / name
    onnx.save_model(m, str(path))
    return path


def check(path: Path, target: str = "11.4", shapes=None):
    return analyze(load_model(path, load_weights=False), target, shapes)


def only(report, op_type: str):
    found = [n for n in report.nodes if n.op_type == op_type]
    assert len(found) == 1, [n.path for n in report.nodes]
    return found[0]


def rules_of(node, severity: str | None = None) -> set[str]:
    return {f.rule for f in node.findings if severity is None or f.severity == severity}


def i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


# ------------------------------------------------------------------ tables


def test_tables_exist_per_version_with_sources():
    assert set(available_versions()) >= {"10.16", "11.4", "rtx"}
    for v in ("10.16", "11.4", "rtx"):
        t = load_table(v)
        rows = list(t.ops.values()) + list(t.any_domain.values())
        assert len(t.ops) >= 200
        assert all(r.source for r in rows), "every row records where its fact comes from"
        assert t.lookup("", "Conv").status == "supported"
        assert t.lookup("", "Unique").status == "unsupported"


def test_tables_differ_exactly_by_the_recorded_11x_deltas():
    a, b = load_table("10.16"), load_table("11.4")
    assert a.lookup("", "DFT").status == "unsupported" and b.lookup("", "DFT").status == "supported"
    assert a.lookup("", "GridSample").param("ranks") == ("4",)
    assert b.lookup("", "GridSample").param("ranks") == ("4", "5")
    assert a.lookup("", "Swish") is None and b.lookup("", "Swish").since == "11.0"
    for name in ("BatchedNMS_TRT", "BatchedNMSDynamic_TRT", "EfficientNMS_ONNX_TRT", "NMS_TRT"):
        assert a.lookup("custom", name).status == "deprecated-plugin"
        assert b.lookup("custom", name).status == "removed-plugin"
    changed = {k for k in a.ops if k in b.ops and a.ops[k].status != b.ops[k].status}
    assert changed == {"DFT"}


def test_every_table_parameter_is_read_by_a_rule():
    import inspect

    from trtconv.analyze import rules

    source = inspect.getsource(rules)
    for v in ("10.16", "11.4", "rtx"):
        for row in load_table(v).ops.values():
            for key in row.params:
                assert f'"{key}"' in source, f"{row.op_type}: parameter {key!r} is read by no rule"
    assert GENERIC_RULES and {"TopK", "Resize", "DeformConv", "LSTM"} <= set(RULES)


def test_shipped_tables_regenerate_from_the_facts(tmp_path):
    from trtconv.analyze.support import DATA_DIR

    for v in ("10.16", "11.4", "rtx"):
        assert render(build_table(FACTS_TSV, v)) == (DATA_DIR / f"trt-{v}.tsv").read_text()
        with open(DATA_DIR / f"trt-{v}.tsv", newline="") as fh:
            assert all(r["source"] for r in csv.DictReader(fh, delimiter="\t"))


def test_unknown_target_is_a_usage_error():
    with pytest.raises(UsageError):
        load_table("9.0")


# ------------------------------------------------------------------ op and dtype rules


def test_op_not_supported_by_parser_is_unsupported(tmp_path):
    p = save(tmp_path, [helper.make_node("Unique", ["x"], ["y"], name="u")], [vi("x", F, [4])], [vi("y", F, None)])
    r = check(p)
    n = only(r, "Unique")
    assert n.status == "unsupported" and rules_of(n) == {"op-unsupported"}
    assert r.exit_code == ExitCode.UNSUPPORTED and r.verdict == "unsupported"


def test_double_is_cast_down_to_float_with_a_warning(tmp_path):
    """The parser converts DOUBLE to FLOAT (onnx-tensorrt convertDtype; measured with RTX: parses, builds)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu_double")]
    r = check(save(tmp_path, nodes, [vi("x", TensorProto.DOUBLE, [2])], [vi("y", TensorProto.DOUBLE, [2])]))
    n = only(r, "Relu")
    assert n.status == "supported" and rules_of(n, "warning") == {"dtype"} and "DOUBLE" in n.findings[0].message
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE, name="to_double")]
    r = check(save(tmp_path, nodes, [vi("x", F, [2])], [vi("y", TensorProto.DOUBLE, [2])], name="c.onnx"))
    assert only(r, "Cast").status == "supported" and r.exit_code == ExitCode.OK
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.UINT32, name="to_u32")]
    r = check(save(tmp_path, nodes, [vi("x", F, [2])], [vi("y", TensorProto.UINT32, [2])], name="u.onnx"))
    assert only(r, "Cast").status == "unsupported"
    assert {f.rule for f in r.findings} == {"io-type"}  # the UINT32 network output, too
    w = numpy_helper.from_array(np.ones(2, np.float64), "w")
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=F), helper.make_node("Add", ["x", "wf"], ["y"])]
    r = check(save(tmp_path, nodes, [vi("x", F, [2])], [vi("y", F, [2])], [w], name="d.onnx"))
    cast = only(r, "Cast")
    assert cast.status == "supported" and rules_of(cast, "warning") == {"dtype"}
    assert r.exit_code == ExitCode.OK


@pytest.mark.parametrize("k, sorted_, expect", [
    (3839, 1, set()), (3840, 1, {"topk-k"}), (10, 0, {"topk-sorted"}),
])
def test_topk_k_limit_and_sorted(tmp_path, k, sorted_, expect):
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=sorted_, name="topk")]
    p = save(tmp_path, nodes, [vi("x", F, [1, 5000])], [vi("v", F, None), vi("i", TensorProto.INT64, None)],
             [i64("k", [k])])
    r = check(p)
    errors = {f.rule for n in r.nodes for f in n.findings if f.severity == "error"}
    assert errors == expect
    assert r.exit_code == (ExitCode.UNSUPPORTED if expect else ExitCode.OK)


def test_topk_runtime_k_is_a_warning(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("TopK", ["x", "s"], ["v", "i"])]
    r = check(save(tmp_path, nodes, [vi("x", F, [1, 8])], [vi("v", F, None), vi("i", TensorProto.INT64, None)]))
    n = only(r, "TopK")
    assert n.status == "supported" and rules_of(n, "warning") == {"topk-k"}


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "Squeeze", "Unsqueeze"])
def test_axes_must_be_constant(tmp_path, op):
    opset = 18
    ok = [helper.make_node(op, ["x", "axes"], ["y"], name="n")]
    inits = [i64("axes", [0])]
    r = check(save(tmp_path, ok, [vi("x", F, [1, 4])], [vi("y", F, None)], inits, opset=opset))
    assert r.exit_code == ExitCode.OK
    const = [helper.make_node("Constant", [], ["axes"], value=i64("v", [0])), *ok]
    r = check(save(tmp_path, const, [vi("x", F, [1, 4])], [vi("y", F, None)], opset=opset, name="c.onnx"))
    assert r.exit_code == ExitCode.OK
    bad = [helper.make_node(op, ["x", "a"], ["y"], name="n")]
    r = check(save(tmp_path, bad, [vi("x", F, [1, 4]), vi("a", TensorProto.INT64, [1])], [vi("y", F, None)],
                   opset=opset, name="b.onnx"))
    n = only(r, op)
    assert n.status == "unsupported" and rules_of(n) == {"constant-input"} and "'axes'" in n.findings[0].message


@pytest.mark.parametrize("attrs, rule", [
    ({"mode": "cubic"}, None),  # onnx-tensorrt maps it to kCUBIC (the 10.15 table omits it)
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "resize-coordinate-mode"),
    ({"antialias": 1, "mode": "linear"}, "resize-antialias"),
    ({"keep_aspect_ratio_policy": "not_larger"}, "resize-aspect-ratio"),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}, None),
])
def test_resize_modes(tmp_path, attrs, rule):
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rs", **attrs)]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    r = check(save(tmp_path, nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, None)], [scales], opset=19))
    if rule is None:
        assert r.exit_code == ExitCode.OK and not r.nodes
    else:
        assert rules_of(only(r, "Resize"), "error") == {rule}


def _deform(tmp_path, pads, name="dc.onnx"):
    nodes = [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], pads=pads, kernel_shape=[3, 3], name="dcn")]
    w = numpy_helper.from_array(np.zeros((4, 2, 3, 3), np.float32), "w")
    return save(tmp_path, nodes, [vi("x", F, [1, 2, 8, 8]), vi("off", F, [1, 18, 8, 8])], [vi("y", F, None)], [w],
                opset=19, name=name)


def test_deformconv_asymmetric_pads_rewritable_symmetric_supported(tmp_path):
    r = check(_deform(tmp_path, [1, 1, 1, 1]))
    n = only(r, "DeformConv")
    assert n.status == "supported" and rules_of(n) == {"needs-nvinfer-plugin"}
    r = check(_deform(tmp_path, [0, 0, 1, 1], "a.onnx"))
    n = only(r, "DeformConv")
    assert rules_of(n, "error") == {"deformconv-pads"}
    assert n.status == "rewritable" and n.rewrite == rewrite_rule_for("", "DeformConv").name
    assert r.exit_code == ExitCode.NEEDS_REWRITE and r.verdict == "needs-rewrite"


def test_int64_outside_int32_warned_but_slice_sentinels_are_not(tmp_path):
    big = i64("idx", [2**40])
    starts, ends = i64("starts", [0]), i64("ends", [np.iinfo(np.int64).max])
    nodes = [helper.make_node("Slice", ["x", "starts", "ends"], ["s"], name="slice"),
             helper.make_node("Gather", ["data", "idx"], ["y"], name="gather")]
    r = check(save(tmp_path, nodes, [vi("x", F, [4]), vi("data", F, [4])], [vi("s", F, None), vi("y", F, None)],
                   [big, starts, ends]))
    assert [n.path for n in r.nodes] == ["gather"]
    assert rules_of(r.nodes[0], "warning") == {"int64-range"} and str(2**40) in r.nodes[0].findings[0].message
    assert r.exit_code == ExitCode.OK


def test_data_dependent_shape_warned(tmp_path):
    nodes = [helper.make_node("NonZero", ["x"], ["y"], name="nz")]
    r = check(save(tmp_path, nodes, [vi("x", F, [4])], [vi("y", TensorProto.INT64, None)]))
    n = only(r, "NonZero")
    assert n.status == "supported" and rules_of(n) == {"data-dependent-shape"} and r.exit_code == ExitCode.OK


@pytest.mark.parametrize("rank, ok_10, ok_11", [(4, True, True), (5, False, True)])
def test_gridsample_rank_by_version(tmp_path, rank, ok_10, ok_11):
    x = [1, 2] + [4] * (rank - 2)
    grid = [1] + [4] * (rank - 2) + [rank - 2]
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs")]
    p = save(tmp_path, nodes, [vi("x", F, x), vi("grid", F, grid)], [vi("y", F, None)], opset=20)
    assert (check(p, "10.16").exit_code == ExitCode.OK) is ok_10
    assert (check(p, "11.4").exit_code == ExitCode.OK) is ok_11


def test_version_deltas_dft_and_swish(tmp_path):
    nodes = [helper.make_node("Swish", ["x"], ["y"], name="sw")]
    p = save(tmp_path, nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=24)
    assert check(p, "10.16").exit_code == ExitCode.UNSUPPORTED
    assert check(p, "11.4").exit_code == ExitCode.OK


@pytest.mark.parametrize("attrs, rule", [({"layout": 1}, "rnn-layout"), ({"input_forget": 1}, "lstm-input-forget")])
def test_lstm_restrictions(tmp_path, attrs, rule):
    w = numpy_helper.from_array(np.zeros((1, 16, 2), np.float32), "W")
    rr = numpy_helper.from_array(np.zeros((1, 16, 4), np.float32), "R")
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4, name="lstm", **attrs)]
    r = check(save(tmp_path, nodes, [vi("x", F, [3, 1, 2])], [vi("y", F, None)], [w, rr]))
    assert rules_of(only(r, "LSTM"), "error") == {rule}


def test_maxpool_indices_output_rejected(tmp_path):
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2], name="mp")]
    r = check(save(tmp_path, nodes, [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None), vi("idx", TensorProto.INT64, None)]))
    n = only(r, "MaxPool")
    assert rules_of(n) == {"unsupported-output"} and "Indices" in n.findings[0].message


# ------------------------------------------------------------------ custom ops, plugins, rewrites


def test_custom_domain_op_needs_plugin(tmp_path):
    nodes = [helper.make_node("MyOp", ["x"], ["y"], domain="acme", name="mine")]
    r = check(save(tmp_path, nodes, [vi("x", F, [4])], [vi("y", F, [4])], extra_opsets=["acme"]))
    n = only(r, "MyOp")
    assert n.status == "plugin" and n.domain == "acme" and n.rewrite is None
    assert r.exit_code == ExitCode.NEEDS_REWRITE


def test_custom_domain_node_with_builtin_op_name_is_parsed_as_that_op(tmp_path):
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], domain="com.microsoft", name="ms_topk")]
    p = save(tmp_path, nodes, [vi("x", F, [1, 5000])], [vi("v", F, None), vi("i", TensorProto.INT64, None)],
             [i64("k", [4000])], extra_opsets=["com.microsoft"])
    n = only(check(p), "TopK")
    assert rules_of(n, "warning") == {"domain-ignored"} and rules_of(n, "error") == {"topk-k"}


@pytest.mark.parametrize("domain, op", [("", "DCNv2"), ("mmcv", "MMCVModulatedDeformConv2d"),
                                        ("", "MMCVModulatedDeformConv2d")])
def test_dcnv2_dialects_are_rewritable_through_the_catalog(tmp_path, domain, op):
    nodes = [helper.make_node(op, ["x", "off", "mask", "w"], ["y"], domain=domain, name="dcn")]
    ins = [vi("x", F, [1, 2, 8, 8]), vi("off", F, [1, 18, 8, 8]), vi("mask", F, [1, 9, 8, 8]), vi("w", F, [4, 2, 3, 3])]
    r = check(save(tmp_path, nodes, ins, [vi("y", F, None)], extra_opsets=[domain] if domain else []))
    n = only(r, op)
    assert n.status == "rewritable" and n.rewrite == rewrite_rule_for(domain, op).name
    assert r.exit_code == ExitCode.NEEDS_REWRITE


@pytest.mark.parametrize("version_attr, warnings", [({"plugin_version": "2"}, set()),
                                                    ({}, {"plugin-version"})])
def test_modulated_deform_conv_plugin_warns_only_when_it_binds_version_1(tmp_path, version_attr, warnings):
    """Only version 1 of the built-in ModulatedDeformConv2d plugin is deprecated; what
    `trtconv rewrite --dcn-target plugin` writes (plugin_version "2") must check clean."""
    nodes = [helper.make_node("ModulatedDeformConv2d", ["x", "off", "mask", "w"], ["y"], name="mdcn",
                              stride=[1, 1], padding=[1, 1], dilation=[1, 1], group=1, deformable_group=1,
                              **version_attr)]
    ins = [vi("x", F, [1, 2, 8, 8]), vi("off", F, [1, 18, 8, 8]), vi("mask", F, [1, 9, 8, 8]), vi("w", F, [4, 2, 3, 3])]
    for version in ("10.16", "11.4"):
        r = check(save(tmp_path, nodes, ins, [vi("y", F, None)], name=f"m{version}.onnx"), version)
        found = [n for n in r.nodes if n.op_type == "ModulatedDeformConv2d"]
        assert r.exit_code == ExitCode.OK
        assert set().union(*(rules_of(n) for n in found)) == warnings


def test_removed_plugin_rejected_on_11_deprecated_on_10(tmp_path):
    nodes = [helper.make_node("BatchedNMS_TRT", ["b", "s"], ["n"], domain="trt", name="nms")]
    p = save(tmp_path, nodes, [vi("b", F, [1, 10, 1, 4]), vi("s", F, [1, 10, 2])], [vi("n", TensorProto.INT32, None)],
             extra_opsets=["trt"])
    old, new = check(p, "10.16"), check(p, "11.4")
    assert old.exit_code == ExitCode.OK and rules_of(only(old, "BatchedNMS_TRT"), "warning") == {"plugin-deprecated"}
    n = only(new, "BatchedNMS_TRT")
    assert n.status == "unsupported" and rules_of(n) == {"plugin-removed"} and "NonMaxSuppression" in n.findings[0].hint
    assert new.exit_code == ExitCode.UNSUPPORTED


def test_subgraph_nodes_reported_with_their_path(tmp_path):
    then_g = helper.make_graph([helper.make_node("Unique", ["x"], ["t"], name="uniq")], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="ident")], "else", [], [vi("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="If_0")]
    r = check(save(tmp_path, nodes, [vi("c", TensorProto.BOOL, []), vi("x", F, [4])], [vi("y", F, None)]))
    assert [n.path for n in r.nodes] == ["If_0/then_branch/uniq"]
    assert r.node_count == 3 and r.exit_code == ExitCode.UNSUPPORTED


# ------------------------------------------------------------------ inputs and --shapes


def test_dynamic_inputs_and_shapes_coverage(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    p = save(tmp_path, nodes, [vi("x", F, ["N", 3, None, 8])], [vi("y", F, None)])
    (x,) = check(p).inputs
    assert x.dynamic and not x.covered and x.dims == ("N", 3, None, 8)
    (x,) = check(p, shapes={"x": (2, 3, 5, 8)}).inputs
    assert x.covered and x.shape == (2, 3, 5, 8)
    with pytest.raises(UsageError):
        check(p, shapes={"y": (1,)})
    with pytest.raises(UsageError):
        check(p, shapes={"x": (2, 4, 5, 8)})  # channel dim is fixed at 3


# ------------------------------------------------------------------ structure and checker policy


def _raw(tmp_path, nodes, inputs, outputs, name="bad.onnx"):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return path


def test_dangling_input_is_invalid_naming_the_node(tmp_path):
    p = _raw(tmp_path, [helper.make_node("Relu", ["ghost"], ["y"], name="relu7")], [vi("x", F, [1])], [vi("y", F, [1])])
    with pytest.raises(InvalidModelError) as err:
        check(p)
    assert "relu7" in err.value.message and "'ghost'" in err.value.message


def test_cycle_is_invalid(tmp_path):
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")]
    with pytest.raises(InvalidModelError, match="cycle"):
        check(_raw(tmp_path, nodes, [vi("x", F, [1])], [vi("b", F, [1])]))


def test_duplicate_tensor_name_is_invalid(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"), helper.make_node("Neg", ["x"], ["y"], name="second")]
    with pytest.raises(InvalidModelError) as err:  # caught by load or by analyze, whichever comes first
        check(_raw(tmp_path, nodes, [vi("x", F, [1])], [vi("y", F, [1])]))
    assert "second" in err.value.message and "'y'" in err.value.message


def test_unsorted_but_acyclic_graph_is_only_a_note(tmp_path):
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="late"), helper.make_node("Neg", ["x"], ["a"], name="early")]
    r = check(_raw(tmp_path, nodes, [vi("x", F, [1])], [vi("y", F, [1])]))
    assert r.exit_code == ExitCode.OK and any("topologically" in w for w in r.warnings)


def test_schema_violation_of_a_standard_node_is_invalid(tmp_path):
    p = _raw(tmp_path, [helper.make_node("Conv", ["x"], ["y"], name="conv_one_input")], [vi("x", F, [1, 1, 4, 4])],
             [vi("y", F, None)])
    assert load_model(p).checker_error
    with pytest.raises(InvalidModelError, match="conv_one_input"):
        check(p)


def test_custom_op_checker_error_is_not_invalid(tmp_path):
    p = _raw(tmp_path, [helper.make_node("DCNv2", ["x"], ["y"], name="dcn")], [vi("x", F, [1])], [vi("y", F, [1])])
    loaded = load_model(p)
    assert loaded.checker_error  # the checker knows no DCNv2 ...
    r = analyze(loaded, "11.4")  # ... but that is a rewrite candidate, not a broken model
    assert r.exit_code == ExitCode.NEEDS_REWRITE and r.checker_error == loaded.checker_error


# ------------------------------------------------------------------ real models


@pytest.mark.parametrize("fixture", ["ocr_det", "ocr_rec", "ocr_cls"])
@pytest.mark.parametrize("target", ["10.16", "11.4"])
def test_ppocr_models_fully_supported_with_dynamic_image_input(request, fixture, target):
    # PP-OCR is a plain CNN (+ SVTR attention in rec) exported with opset 11/12: only ops the 10.15
    # table lists without restrictions that these exports hit; the image input x is NCHW with C=3
    # fixed and batch/height/width left dynamic by the Paddle exporter.
    r = check(request.getfixturevalue(fixture), target)
    assert r.exit_code == ExitCode.OK and r.verdict == "supported"
    assert r.counts == {"supported": r.node_count} and r.node_count > 500
    (x,) = r.inputs
    assert x.name == "x" and x.dynamic and x.dims[1] == 3 and len(x.dims) == 4 and not x.covered


def test_ppocr_det_shapes_cover_the_profile(ocr_det):
    r = check(ocr_det, shapes={"x": (1, 3, 640, 640)})
    assert all(i.covered for i in r.inputs) and r.exit_code == ExitCode.OK


def _if_rank_nodes(report):
    return [n for n in report.nodes if "if-branch-rank" in rules_of(n)]


def test_silero_lstm_state_in_if_fails_the_rtx_build_and_rank_ifs_only_warn(silero):
    # Silero wraps its 16 kHz and 8 kHz networks in the two branches of the top If (on sample rate);
    # each uses its LSTM's Y_h inside that branch, which the RTX builder refuses (measured: graphScope
    # assertion), while the decoder's "squeeze if dim == 1" Ifs depend only on shapes: the parser
    # accepts them and a fixed profile builds them (warnings, not errors).
    r = check(silero, "rtx")
    lstm = [n for n in r.nodes if n.op_type == "LSTM"]
    assert len(lstm) == 4 and all(n.status == "unsupported" and rules_of(n, "error") == {"rnn-in-if"} for n in lstm)
    assert {n.path.split("/")[1] for n in lstm} == {"then_branch", "else_branch"}
    assert all(f.stage == "builder" for n in lstm for f in n.findings) and r.stage() == "builder"
    ranks = _if_rank_nodes(r)
    assert ranks and all(rules_of(n, "error") == set() and n.status == "supported" for n in ranks)
    assert all("shapes" in f.hint for n in ranks for f in n.findings if f.rule == "if-branch-rank")
    r11 = check(silero, "11.4")  # not measured on 11.x: the same finding, as a warning
    assert r11.exit_code == ExitCode.OK and {"rnn-in-if"} <= {f.rule for f in r11.all_findings()}
    assert {i.name: i.dynamic for i in r.inputs} == {"input": True, "state": True, "sr": False}


def test_silero_ifless_export_is_fully_supported(silero):
    r = check(Path(silero).with_name("silero_vad_op18_ifless.onnx"))
    assert r.exit_code == ExitCode.OK and not r.nodes


def test_loop_body_nodes_reported_with_their_path(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Unique", ["v_in"], ["v_out"], name="u")],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("v_in", F, None)],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", F, None)])
    trip = i64("trip", 3)
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body, name="loop")]
    r = check(save(tmp_path, nodes, [vi("x", F, [4])], [vi("y", F, None)], [trip, cond]))
    assert [n.path for n in r.nodes] == ["loop/body/u"]


def test_every_rule_id_is_documented():
    import importlib
    import re

    from trtconv.analyze import rules

    analyze_module = importlib.import_module("trtconv.analyze.run_check")

    doc = (Path(__file__).parents[2] / "docs" / "analyze.md").read_text()
    src = Path(rules.__file__).read_text() + Path(analyze_module.__file__).read_text()
    ids = set(re.findall(r'(?:_error|_warn|Finding)\(\s*"([a-z0-9-]+)"', src)) | {"custom-op"}
    assert len(ids) > 25
    missing = sorted(i for i in ids if f"`{i}`" not in doc)
    assert not missing, f"rule ids missing from docs/analyze.md: {missing}"


UNARY_OK = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Softplus", "Identity", "Erf", "HardSigmoid"]
UNARY_NO = ["Unique", "Det"]  # marked N in the parser table


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=st.lists(st.sampled_from(UNARY_OK), min_size=1, max_size=12),
       bad=st.one_of(st.none(), st.tuples(st.sampled_from(UNARY_NO), st.integers(0, 12))),
       target=st.sampled_from(["10.16", "11.4"]))
def test_property_chains_flag_exactly_the_unsupported_node(tmp_path, chain, bad, target):
    ops = list(chain)
    if bad is not None:
        ops.insert(min(bad[1], len(ops)), bad[0])
    nodes = [helper.make_node(op, [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i, op in enumerate(ops)]
    shape = [3, 3] if "Det" in ops else [4]
    p = save(tmp_path, nodes, [vi("t0", F, shape)], [vi(f"t{len(ops)}", F, None)], name="chain.onnx")
    r = check(p, target)
    expected = [f"n{i}" for i, op in enumerate(ops) if op in UNARY_NO]
    assert [n.path for n in r.nodes] == expected
    assert r.exit_code == (ExitCode.UNSUPPORTED if expected else ExitCode.OK)
    assert r.node_count == len(ops)


def test_index_validates_structure_of_protos_handed_to_it_directly():
    # analyze() also serves the Python API, so the index re-validates what load may have checked.
    from trtconv.analyze.lookups import build_index

    def model(nodes):
        g = helper.make_graph(nodes, "g", [vi("x", F, [1])], [vi("y", F, [1])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    cases = {
        "cycle": [helper.make_node("Relu", ["b"], ["y"], name="n1"), helper.make_node("Relu", ["y"], ["b"], name="n2")],
        "already exists": [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")],
        "no node, graph input or initializer": [helper.make_node("Relu", ["ghost"], ["y"], name="g")],
    }
    for words, nodes in cases.items():
        with pytest.raises(InvalidModelError, match=words):
            build_index(model(nodes))
    idx = build_index(model([helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]))
    assert len(idx.nodes) == 2 and "topologically" in idx.warnings[0]


# ------------------------------------------------------------------ stages and hints (issue 17)


def test_ort_dynamically_quantized_model_is_told_the_rewrite(ocr_cls, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = tmp_path / "cls_dyn.onnx"
    quantize_dynamic(str(ocr_cls), str(out), weight_type=QuantType.QUInt8, op_types_to_quantize=["Conv", "MatMul"])
    r = check(out, "rtx")
    quant = [n for n in r.nodes if n.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeLinear")]
    assert quant and all(n.status == "rewritable" and n.rewrite == "ort-dynamic-integer" for n in quant)
    assert all("trtconv rewrite" in f.hint and "ort-dynamic-integer" in f.hint for n in quant for f in n.errors)


def test_rewritable_node_hint_names_the_rewrite_not_a_plugin(tmp_path):
    nodes = [helper.make_node("DCNv2", ["x", "off", "mask", "w"], ["y"], name="dcn")]
    ins = [vi("x", F, [1, 2, 8, 8]), vi("off", F, [1, 18, 8, 8]), vi("mask", F, [1, 9, 8, 8]), vi("w", F, [4, 2, 3, 3])]
    n = only(check(save(tmp_path, nodes, ins, [vi("y", F, None)])), "DCNv2")
    assert n.status == "rewritable" and all("trtconv rewrite" in f.hint and "--plugins" not in f.hint
                                            for f in n.errors)


def _if_model(tmp_path, cond_from_value: bool) -> Path:
    axes = i64("axes0", [0])
    then_g = helper.make_graph([helper.make_node("Squeeze", ["x", "axes_t"], ["t_out"])], "then", [],
                              [vi("t_out", F, None)], [i64("axes_t", [0])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [], [vi("e_out", F, None)])
    if cond_from_value:
        nodes = [helper.make_node("Greater", ["flag", "zero"], ["cond"])]
        ins = [vi("x", F, ["n", 4]), vi("flag", F, [])]
    else:
        nodes = [helper.make_node("Shape", ["x"], ["shp"], start=0, end=1),
                 helper.make_node("Equal", ["shp", "one"], ["c1"]), helper.make_node("Squeeze", ["c1", "axes0"], ["cond"])]
        ins = [vi("x", F, ["n", 4])]
    nodes.append(helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="if"))
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"), i64("one", [1]), axes]
    return save(tmp_path, nodes, ins, [vi("y", F, None)], inits, name=f"if_{cond_from_value}.onnx")


@pytest.mark.parametrize("by_value", [True, False])
def test_if_branch_rank_is_a_builder_finding_and_its_hint_follows_the_condition(tmp_path, by_value):
    """Measured with RTX: both parse; a value condition fails the build, a shape-only one builds
    with a fixed profile. 'Give static shapes' is only offered where it can help."""
    n = only(check(_if_model(tmp_path, by_value), "rtx"), "If")
    f = next(f for f in n.findings if f.rule == "if-branch-rank")
    assert f.stage == "builder" and f.severity == ("error" if by_value else "warning")
    assert ("static shapes cannot" in f.hint) is by_value and ("--shapes" in f.hint) is not by_value


def test_casts_to_quantized_types_fail_at_the_builder_unknown_types_at_the_parser(tmp_path):
    for to, stage in ((TensorProto.FLOAT8E4M3FN, "builder"), (TensorProto.FLOAT8E5M2, "parser")):
        nodes = [helper.make_node("Cast", ["x"], ["y"], to=to, name="c")]
        r = check(save(tmp_path, nodes, [vi("x", F, [4])], [vi("y", F, [4])], name=f"c{to}.onnx"), "rtx")
        assert {f.stage for f in only(r, "Cast").errors} == {stage} and r.stage() == stage
        assert r.to_json()["stage"] == stage
