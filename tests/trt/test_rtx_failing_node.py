"""A build the real TensorRT-RTX builder refuses says where the failure starts: the node its words name,
or else the first node whose joining the graph makes the builder fail, found by building prefixes of
the graph (each in its own process).

The graph here: a dozen element-wise nodes, an If whose then-branch runs an LSTM (with a bias) and
uses its Y_h — the RTX builder fails that with a graphScope assertion that names no node (measured;
`trtconv check` knows it as rnn-in-if, which is why this drives the adapter, not the CLI, whose
recheck stage stops first) — then a tail of eight nodes that build on their own.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.command_line import retry_command
from trtconv.errors import BuildError, ExitCode
from trtconv.plan.build_plan import BuildPlan
from trtconv.trt.builder import build_engine, builder_error
from trtconv.trt.failing_node import FailingNode, locate, named_node, plan_builds, prefix_model
from trtconv.trt.flavour import RTX, active

pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is in the test extra: run `make install`")

HID, FEAT, STEPS = 4, 8, 5  # LSTM hidden size, input features, time steps


def _vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def lstm_in_if(path: Path) -> Path:
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    def i64(name: str, value: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array([value], np.int64), name)

    then = helper.make_graph([helper.make_node("LSTM", ["seq", "W", "R", "B"], ["Y", "Yh"], hidden_size=HID, name="lstm"),
                              helper.make_node("Squeeze", ["Yh", "ax0"], ["yb"], name="squeeze")],
                             "then", [], [_vi("yb", [1, HID])])
    other = helper.make_graph([helper.make_node("ReduceMean", ["seq"], ["m2"], axes=[0], keepdims=0, name="mean"),
                               helper.make_node("Slice", ["m2", "s0", "sH", "ax1"], ["yb2"], name="first")],
                              "else", [], [_vi("yb2", [1, HID])])
    nodes, prev = [], "x"
    for i in range(12):
        nodes.append(helper.make_node("Relu" if i % 2 else "Mul", [prev] + ([] if i % 2 else ["half"]), [f"a{i}"],
                                      name=f"pre{i}"))
        prev = f"a{i}"
    nodes += [helper.make_node("Transpose", [prev], ["seq"], perm=[1, 0, 2], name="to_seq"),
              helper.make_node("ReduceSum", [prev], ["s"], keepdims=0, name="sum"),
              helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
              helper.make_node("If", ["cond"], ["state"], then_branch=then, else_branch=other, name="branch")]
    prev = "state"
    for i in range(8):
        nodes.append(helper.make_node("Relu", [prev], [f"b{i}"], name=f"post{i}"))
        prev = f"b{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    inits = [weight("W", 1, 4 * HID, FEAT), weight("R", 1, 4 * HID, HID), weight("B", 1, 8 * HID),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             i64("ax0", 0), i64("s0", 0), i64("sH", HID), i64("ax1", 1)]
    g = helper.make_graph(nodes, "lstm_in_if", [_vi("x", [1, STEPS, FEAT])], [_vi("y", [1, HID])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _prefix_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("trtconv-prefix-*")}


def test_a_failure_the_builder_names_no_node_for_is_located_by_prefix_builds(tmp_path, monkeypatch):
    model = lstm_in_if(tmp_path / "m.onnx")
    engine = tmp_path / "m.engine"
    # a temporary folder of this test's own: another worker's search (Silero VAD's build) makes its own at once
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    before = _prefix_dirs()
    with pytest.raises(BuildError) as err:
        build_engine(BuildPlan(onnx_path=model, engine_path=engine, target="rtx"), timing_cache=None)
    msg = err.value.message
    assert err.value.exit_code == ExitCode.BUILD_FAILED and "\n" not in msg
    assert msg.startswith("TensorRT-RTX's builder failed: it fails once node branch (If) joins the graph: "
                          "the nodes before it build ("), msg
    assert "; its error: " in msg and "graphScope" in msg  # TensorRT's own words follow
    assert "`trtconv check` reads the parser" in err.value.hint
    assert not engine.exists() and _prefix_dirs() <= before  # nothing left behind

    # the claim, from two builds of its own: the graph through the node before the If builds, through it not
    names = [n.name for n in onnx.load(str(model)).graph.node]
    found = locate(model, [], plan_builds(BuildPlan(onnx_path=model, engine_path=engine, target="rtx"), RTX))
    assert isinstance(found, FailingNode) and found.how == "prefix builds" and found.narrowed_to is None
    assert found.index == names.index("branch") and found.builds_before == found.index - 1
    assert 1 < found.builds <= len(names).bit_length()  # a bisection, not a walk


def test_prefixes_mark_what_later_nodes_read_and_nothing_else(tmp_path):
    model = onnx.load(str(lstm_in_if(tmp_path / "m.onnx")))
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    sub = prefix_model(model, 14, typed)  # through "sum": the If reads "seq" (through its branches) and "s"
    assert sub is not None and [o.name for o in sub.graph.output] == ["seq", "s"]
    assert {i.name for i in sub.graph.initializer} == {"half"}  # only what the prefix reads
    assert prefix_model(model, 0, typed) is None


def test_with_no_time_to_search_the_builders_words_stand_alone(tmp_path):
    model = lstm_in_if(tmp_path / "m.onnx")
    plan = BuildPlan(onnx_path=model, engine_path=tmp_path / "m.engine", target="rtx")
    assert locate(model, [], plan_builds(plan, RTX), budget_s=0) is None
    with active(RTX):
        err = builder_error(["[graphScope.cpp::analyze::471] Error Code 2: Internal Error\n(Assertion failed.)"], RTX)
    assert err.message == ("TensorRT-RTX's builder failed: [graphScope.cpp::analyze::471] Error Code 2: Internal "
                           "Error (Assertion failed.)")  # every line of it, joined
    assert "`trtconv check` lists nodes it may reject" in err.hint
    # the hint is the command as typed with -v, which runs as printed
    assert retry_command(["build", "m.onnx", "-o", "m.engine"], err) == (
        "trtconv build m.onnx -o m.engine -v  # for TensorRT's full log; `trtconv check` lists nodes it may reject")


def test_a_layer_myelin_names_is_read_back_to_its_onnx_node():
    # TensorRT-RTX 1.7's words on the decoder of EnCodec (transformers' EncodecModel, exported by torch.onnx):
    # the layer is the ONNX node's name plus Myelin's own suffix
    said = ("IBuilder::buildSerializedNetwork: Error Code 1: Myelin ([shape.cpp:175: ~op_constraints_msg_streamer_t] \n"
            "Error during shape inference of\n/m/decoder/layers.4/block.0/Elu_output_0 : f32[1, 256, 600] = "
            "elu(/m/decoder/layers.3/Slice_output_0, /m/decoder/layers.4/block.0/Elu_alpha), "
            "name=/m/decoder/layers.4/block.0/Elu_elu\nError is:\nThere are 2 inputs. Expected 1.")
    nodes = [helper.make_node("Elu", ["a"], ["b"], name="/m/decoder/layers.4/block.0/Elu"),
             helper.make_node("Elu", ["b"], ["c"], name="/m/decoder/layers.4/block.0/Elu_1"),
             helper.make_node("Relu", ["c"], ["d"], name="/m/decoder/layers.4/block")]
    model = helper.make_model(helper.make_graph(nodes, "g", [_vi("a", [1])], [_vi("d", [1])]))
    found = named_node([said], model)
    assert found == FailingNode("/m/decoder/layers.4/block.0/Elu", "Elu", 0, "named by the builder")
    assert found.describe() == "the builder names node /m/decoder/layers.4/block.0/Elu (Elu)"
    assert named_node(["Error Code 2: Internal Error (Assertion failed.)"], model) is None


def test_a_search_cut_short_says_the_range_it_narrowed_to():
    cut = FailingNode("lstm", "LSTM", 40, "prefix builds", builds_before=20, narrowed_to=20, builds=3)
    assert cut.describe() == ("the graph builds through node #20 and fails by node lstm (LSTM) (#40); the search "
                              "stopped there (3 prefix builds in the time allowed)")
    first = FailingNode("lstm", "LSTM", 40, "prefix builds", builds_before=-1, narrowed_to=-1, builds=2)
    assert first.describe().startswith("it fails by node lstm (LSTM) (#40); ")  # no prefix built at all


def test_check_live_says_where_the_real_build_fails(tmp_path):
    import json

    from click.testing import CliRunner

    from trtconv.cli.main import cli

    model = lstm_in_if(tmp_path / "m.onnx")
    res = CliRunner().invoke(cli, ["check", "--trt", "rtx", "--live", str(model)])
    assert res.exit_code == ExitCode.UNSUPPORTED, res.output
    assert "live build: it fails once node branch (If) joins the graph: the nodes before it build (" in res.stdout
    res = CliRunner().invoke(cli, ["check", "--trt", "rtx", "--live", "--json", str(model)])
    live = json.loads(res.stdout)["live"]
    assert live["build"] == "fail" and live["failing_node"].startswith("it fails once node branch (If)")


def test_a_child_that_fails_for_its_own_reasons_tells_nothing(tmp_path):
    # a child whose TensorRT does not import ends in a traceback (exit 1): no verdict on the prefix, where it
    # used to read as "the builder refused it" and steer the bisection
    from dataclasses import replace

    from trtconv.trt.failing_node import _builds_in_child

    model = lstm_in_if(tmp_path / "m.onnx")
    plan = BuildPlan(onnx_path=model, engine_path=tmp_path / "m.engine", target="rtx")
    assert _builds_in_child(plan, replace(RTX, module="no_such_tensorrt"), 60) is None
    assert _builds_in_child(plan, RTX, 60) is False  # the real builder on the whole graph: refused
