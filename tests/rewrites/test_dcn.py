"""DCNv2 rewrites: the float64 reference, golden before/after graphs per dialect and target,
and DCN models exported from PyTorch in all three dialects, proven against ONNX Runtime."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import AccuracyError, UnsupportedModelError
from trtconv.load import load_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, builtin_plugin_spec, rewrite
from trtconv.rewrites.catalog import rewrite_rule_for
from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d

F = TensorProto.FLOAT
RNG_SEED = 1234

# (N, C, H, W, Cout, k, stride, pads, dilation, group, deformable_group, mask, bias)
CASES = [
    (1, 2, 5, 5, 2, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    (2, 4, 7, 9, 6, 3, (2, 2), (1, 1, 1, 1), (1, 1), 2, 2, True, True),  # odd sizes, stride 2, groups 2, dg 2
    (1, 4, 9, 8, 4, 3, (1, 2), (2, 2, 2, 2), (2, 2), 1, 2, True, False),  # dilation 2
    (1, 4, 6, 7, 2, 3, (2, 1), (0, 1, 2, 1), (1, 2), 2, 1, False, True),  # asymmetric pads, no mask
    (1, 2, 5, 6, 3, 2, (1, 1), (0, 0, 1, 1), (1, 1), 1, 1, False, False),  # even kernel, nothing optional
]


def _case_arrays(case, rng, offset_scale=3.0):
    n, c, h, w, co, k, s, p, d, g, dg, with_mask, with_bias = case
    params = DcnParams(s, p, d, g, dg)
    oh, ow = params.out_hw(h, w, k, k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, c // g, k, k)).astype(np.float32)
    # large offsets: many samples fall outside the image or straddle its border
    off = (rng.standard_normal((n, 2 * dg * k * k, oh, ow)) * offset_scale).astype(np.float32)
    mask = rng.random((n, dg * k * k, oh, ow)).astype(np.float32) if with_mask else None
    bias = rng.standard_normal(co).astype(np.float32) if with_bias else None
    return params, x, wt, off, mask, bias


def _deformconv_model(case, arrays, opset=19) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    params, x, wt, off, mask, bias = arrays
    k = case[5]
    names = ["X", "W", "offset", "B" if bias is not None else "", "mask" if mask is not None else ""]
    while names and names[-1] == "":
        names.pop()
    vals = {"X": x, "W": wt, "offset": off, "B": bias, "mask": mask}
    node = helper.make_node("DeformConv", names, ["Y"], strides=list(params.stride), pads=list(params.pads),
                            dilations=list(params.dilation), group=params.group,
                            offset_group=params.deformable_group, kernel_shape=[k, k])
    feeds = {nm: vals[nm] for nm in names if nm}
    g = helper.make_graph([node], "dc", [helper.make_tensor_value_info(nm, F, v.shape) for nm, v in feeds.items()],
                          [helper.make_tensor_value_info("Y", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10), feeds


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_reference_matches_onnxruntime_deformconv(case):
    """ORT 1.31's DeformConv and our float64 reference agree: same offset layout, same borders."""
    rng = np.random.default_rng(RNG_SEED)
    arrays = _case_arrays(case, rng)
    params, x, wt, off, mask, bias = arrays
    model, feeds = _deformconv_model(case, arrays)
    got = run_model(model, feeds)["Y"]
    ref = modulated_deform_conv2d(x, off, mask, wt, bias, params)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-5


def test_reference_matches_onnx_reference_evaluator():
    """An independent implementation (onnx's GridSample-based DeformConv) agrees with ours."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    case = (1, 2, 5, 6, 2, 3, (2, 1), (1, 0, 1, 2), (1, 1), 2, 2, True, True)
    arrays = _case_arrays(case, rng, offset_scale=1.5)
    params, x, wt, off, mask, bias = arrays
    model, feeds = _deformconv_model(case, arrays)
    got = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.abs(got - modulated_deform_conv2d(x, off, mask, wt, bias, params)).max() <= 1e-5


def test_reference_samples_outside_image_as_zero():
    """Every sample pushed far outside the image contributes nothing: output = bias."""
    x = np.ones((1, 1, 4, 4))
    w = np.ones((1, 1, 3, 3))
    off = np.full((1, 18, 4, 4), 100.0)
    out = modulated_deform_conv2d(x, off, None, w, np.array([0.5]), DcnParams(pads=(1, 1, 1, 1)))
    assert np.all(out == 0.5)
    # half a pixel past the border keeps half the weight (bilinear with zero padding)
    off_half = np.zeros((1, 18, 4, 4))
    off_half[:, 1::2] = -0.5  # dx
    one_tap = modulated_deform_conv2d(x, off_half, None, _tap(1, 1), None, DcnParams(pads=(1, 1, 1, 1)))
    assert one_tap[0, 0, 0, 0] == pytest.approx(0.5) and one_tap[0, 0, 0, 1] == pytest.approx(1.0)
    left = modulated_deform_conv2d(x, off_half, None, _tap(1, 0), None, DcnParams(pads=(1, 1, 1, 1)))
    assert left[0, 0, 0, 0] == pytest.approx(0.0) and left[0, 0, 0, 1] == pytest.approx(0.5)


def _tap(i, j):
    k = np.zeros((1, 1, 3, 3))
    k[0, 0, i, j] = 1
    return k


# ------------------------------------------------------------------ golden before/after, built in code


def _dcn_graph(tmp_path: Path, dialect: str, *, stride=(1, 1), pad=(1, 1), dil=(1, 1), groups=1, dg=1,
               bias=True, opset=None, asym=None, dtype=np.float32) -> Path:
    rng = np.random.default_rng(3)
    c, co, k, h, w = 4, 6, 3, 7, 9
    params = DcnParams(stride, asym or (pad[0], pad[1], pad[0], pad[1]), dil, groups, dg)
    oh, ow = params.out_hw(h, w, k, k)
    wt = numpy_helper.from_array((rng.standard_normal((co, c // groups, k, k)) * 0.3).astype(dtype), "weight")
    b = numpy_helper.from_array(rng.standard_normal(co).astype(dtype), "bias")
    inits = [wt] + ([b] if bias else [])
    T = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ins = [helper.make_tensor_value_info("x", T, [1, c, h, w]),
           helper.make_tensor_value_info("offset", T, [1, 2 * dg * k * k, oh, ow]),
           helper.make_tensor_value_info("mask", T, [1, dg * k * k, oh, ow])]
    opsets = [helper.make_opsetid("", opset or (19 if dialect == "onnx" else 11))]
    if dialect == "centernet":
        node = helper.make_node("DCNv2", ["x", "offset", "mask", "weight", "bias" if bias else ""], ["dcn"],
                                name="dcn0", stride=list(stride), padding=list(pad), dilation=list(dil),
                                deformable_groups=dg)
    elif dialect == "mmcv":
        node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"] + (["bias"] if bias else []),
                                ["dcn"], name="dcn0", domain="mmcv", stride=list(stride), padding=list(pad),
                                dilation=list(dil), groups=groups, deform_groups=dg)
        opsets.append(helper.make_opsetid("mmcv", 1))
    else:
        node = helper.make_node("DeformConv", ["x", "weight", "offset", "bias" if bias else "", "mask"], ["dcn"],
                                name="dcn0", strides=list(stride), pads=list(params.pads), dilations=list(dil),
                                group=groups, offset_group=dg, kernel_shape=[k, k])
    relu = helper.make_node("Relu", ["dcn"], ["y"], name="relu")
    g = helper.make_graph([node, relu], "g", ins, [helper.make_tensor_value_info("y", T, None)], initializer=inits)
    path = tmp_path / f"{dialect}.onnx"
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=8), path)
    return path


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("dialect", ["centernet", "mmcv"])
def test_golden_dcnv2_to_deformconv(tmp_path, dialect):
    path = _dcn_graph(tmp_path, dialect, stride=(2, 2), pad=(2, 2), dil=(2, 2), groups=2 if dialect == "mmcv" else 1,
                      dg=2)
    res = rewrite(load_model(path))
    nodes = [(n.op_type, n.domain) for n in res.model.graph.node]
    assert nodes == [("DeformConv", ""), ("Relu", "")]
    dc = res.model.graph.node[0]
    assert list(dc.input) == ["x", "weight", "offset", "bias", "mask"]
    assert _attrs(dc) == {"strides": [2, 2], "pads": [2, 2, 2, 2], "dilations": [2, 2],
                          "group": 2 if dialect == "mmcv" else 1, "offset_group": 2, "kernel_shape": [3, 3]}
    opsets = {o.domain: o.version for o in res.model.opset_import}
    assert opsets == {"": 19}  # raised from 11; the mmcv import is gone
    entry = res.report.rewrites[0]
    assert entry.rule == f"dcnv2-{dialect}" and entry.proof.passed and entry.proof.method == "onnxruntime"
    assert entry.proof.max_abs is not None and entry.proof.max_abs <= 1e-5
    assert res.report.graph_proof.passed and res.report.graph_proof.method == "onnxruntime"
    onnx.checker.check_model(res.model)


@pytest.mark.parametrize("target", ["deformconv", "trt-plugin"])
def test_fp16_dcn_is_proven_in_fp16(tmp_path, target):
    path = _dcn_graph(tmp_path, "mmcv", stride=(2, 2), dg=2, dtype=np.float16)
    res = rewrite(load_model(path), RewriteSettings(dcn_target=target))
    proof = res.report.rewrites[0].proof
    assert proof.passed and proof.stats[0].max_abs > 0  # really computed in FP16, not silently in FP32
    assert res.report.graph_proof.passed


def test_golden_mmcv_to_trt_plugin(tmp_path):
    path = _dcn_graph(tmp_path, "mmcv", stride=(2, 2), pad=(1, 1), groups=2, dg=2)
    res = rewrite(load_model(path), RewriteSettings(dcn_target="trt-plugin"))
    plug = res.model.graph.node[0]
    assert (plug.op_type, plug.domain) == ("ModulatedDeformConv2d", "trt.plugins")
    assert list(plug.input) == ["x", "offset", "mask", "weight", "bias"]
    a = _attrs(plug)
    # the traps: plugin_version "2" (the parser defaults to "1"), all five fields, INT types
    assert a["plugin_version"] == b"2" and a["plugin_namespace"] == b""
    assert {k: a[k] for k in ("stride", "padding", "dilation", "group", "deformable_group")} == {
        "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "group": 2, "deformable_group": 2}
    kinds = {at.name: at.type for at in plug.attribute}
    assert kinds["stride"] == onnx.AttributeProto.INTS and kinds["group"] == onnx.AttributeProto.INT
    assert res.report.rewrites[0].proof.method == "reference-evaluator" and res.report.rewrites[0].proof.passed
    assert {o.domain: o.version for o in res.model.opset_import} == {"": 11, "trt.plugins": 1}


def test_deformconv_without_mask_to_trt_plugin_gets_ones_mask_and_pad(tmp_path):
    """ONNX DeformConv: no mask → a ones mask of the right shape; asymmetric pads → explicit Pad."""
    rng = np.random.default_rng(5)
    wt = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "weight")
    pads = [0, 1, 2, 1]
    p = DcnParams((1, 1), tuple(pads), (1, 1), 1, 1)
    oh, ow = p.out_hw(6, 7, 3, 3)
    node = helper.make_node("DeformConv", ["x", "weight", "offset"], ["y"], name="dc", pads=pads, kernel_shape=[3, 3])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 2, 6, 7]),
                                        helper.make_tensor_value_info("offset", F, [1, 18, oh, ow])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=[wt])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    res = rewrite(model, RewriteSettings(dcn_target="trt-plugin", fold_constants=False))
    ops = [n.op_type for n in res.model.graph.node]
    assert ops[0] == "Pad" and ops[-1] == "ModulatedDeformConv2d" and "ConstantOfShape" in ops
    pad_amounts = next(i for i in res.model.graph.initializer if i.name.endswith("pad_amounts"))
    assert numpy_helper.to_array(pad_amounts).tolist() == [0, 0, 0, 0, 0, 0, 2, 0]
    assert _attrs(res.model.graph.node[-1])["padding"] == [0, 1]
    assert res.report.rewrites[0].proof.passed
    # target deformconv: asymmetric pads also split; the original is ORT-runnable, so the graph proof
    # compares the whole model before and after
    res2 = rewrite(model)
    assert [n.op_type for n in res2.model.graph.node] == ["Pad", "DeformConv"]
    assert _attrs(res2.model.graph.node[1])["pads"] == [0, 1, 0, 1]
    assert res2.report.graph_proof.method == "onnxruntime" and res2.report.graph_proof.passed
    assert res2.report.graph_proof.reason == ""  # nothing cut: a true before/after comparison
    feeds = {"x": rng.standard_normal((1, 2, 6, 7)).astype(np.float32),
             "offset": (rng.standard_normal((1, 18, oh, ow)) * 3).astype(np.float32)}
    assert np.abs(run_model(model, feeds)["y"] - run_model(res2.model, feeds)["y"]).max() <= 1e-5


def test_symmetric_deformconv_is_left_alone(tmp_path):
    path = _dcn_graph(tmp_path, "onnx")
    res = rewrite(load_model(path))
    assert res.report.rewrites == ()
    assert [n.op_type for n in res.model.graph.node] == ["DeformConv", "Relu"]


def test_trtconv_plugin_target_follows_the_spec(tmp_path):
    spec = builtin_plugin_spec()  # the one shipped inside the package
    path = _dcn_graph(tmp_path, "centernet", stride=(2, 1), pad=(1, 1), dg=2, bias=False)
    res = rewrite(load_model(path), RewriteSettings(dcn_target="trtconv-plugin", dcn_plugin=spec))
    plug = next(n for n in res.model.graph.node if n.op_type == spec.name)
    assert plug.domain == spec.domain
    a = _attrs(plug)
    assert a["plugin_namespace"].decode() == spec.namespace
    for name, value in spec.constants:
        assert a[name] == (value.encode() if isinstance(value, str) else value)
    roles = dict(spec.fields)
    by_role = {role: a[name] for name, role in roles.items()}
    assert by_role["stride"] == [2, 1] and by_role["deformable_group"] == 2
    # weight re-laid out when the spec asks for it; a zero bias fed when the spec requires bias
    w_name = plug.input[spec.inputs.index("weight")]
    w = numpy_helper.to_array(next(i for i in res.model.graph.initializer if i.name == w_name))
    assert w.shape == ((6, 3, 3, 4) if spec.weight_layout == "OHWI" else (6, 4, 3, 3))
    assert len(plug.input) == len(spec.inputs)
    assert res.report.rewrites[0].proof.passed


def test_tight_tolerance_fails_the_proof(tmp_path):
    path = _dcn_graph(tmp_path, "mmcv")
    with pytest.raises(AccuracyError, match="rewrite proof failed"):
        rewrite(load_model(path), RewriteSettings(node_tolerance=1e-12))


def test_wrong_replacement_is_caught_by_the_node_proof():
    """The node proof compares against the *original* op: a replacement with another stride fails."""
    import onnx_graphsurgeon as gs

    from trtconv.rewrites.dcn.deform_rule import DcnMatch, proof_inputs
    from trtconv.rewrites.dcn.deformconv import DEFORMCONV
    from trtconv.rewrites.dcn.dialects import DcnNode
    from trtconv.rewrites.dcn.lowering import DcnInputs
    from trtconv.rewrites.emitter import Emitter
    from trtconv.rewrites.proof import prove_node
    from trtconv.rewrites.rewrite_settings import NODE_RTOL

    rng = np.random.default_rng(0)
    wt = gs.Constant("w", rng.standard_normal((2, 2, 3, 3)).astype(np.float32))
    x, off, mask = (gs.Variable(n, dtype=np.float32) for n in ("x", "off", "mask"))
    original = DcnNode("mmcv", "x", "off", "mask", "w", "", DcnParams(stride=(2, 2), pads=(1, 1, 1, 1)), (3, 3))
    f32 = np.dtype(np.float32)

    def replaced_by(dcn: DcnNode, base: str, out: gs.Variable) -> list:
        em = Emitter(gs.Graph(), base)
        DEFORMCONV.emit(em, dcn, DcnInputs(x, off, mask, wt, None), out, None)
        return em.nodes

    def prove(nodes: list, output: str):
        values = proof_inputs(original, (2, 2, 3, 3), None, {"w": wt.values}, f32, 0)
        return prove_node(DcnMatch(original, DEFORMCONV, None).proof_case(nodes, output, values, 19, NODE_RTOL))

    # same output shape, other numbers: dilation 2 with pads 2 instead of dilation 1 with pads 1
    same_shape = DcnNode("mmcv", "x", "off", "mask", "w", "",
                         DcnParams(stride=(2, 2), pads=(2, 2, 2, 2), dilation=(2, 2)), (3, 3))
    proof = prove(replaced_by(same_shape, "a", gs.Variable("y", dtype=np.float32)), "y")
    assert not proof.passed and proof.max_abs is not None and proof.max_abs > 1e-2
    # another stride: the replacement cannot even run on the original's shapes
    crash = DcnNode("mmcv", "x", "off", "mask", "w", "", DcnParams(stride=(1, 1), pads=(1, 1, 1, 1)), (3, 3))
    proof = prove(replaced_by(crash, "b", gs.Variable("y2", dtype=np.float32)), "y2")
    assert not proof.passed and "failed to run" in proof.reason
    # and the right replacement passes the same proof
    assert prove(replaced_by(original, "c", gs.Variable("y3", dtype=np.float32)), "y3").passed


def test_unknown_weight_shape_is_a_clear_error():
    node = helper.make_node("DCNv2", ["x", "o", "m", "w", "b"], ["y"], name="d", stride=1, padding=1, dilation=1,
                            deformable_groups=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, F, None) for n in "xomwb"],
                          [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    with pytest.raises(UnsupportedModelError, match="weight's shape is unknown"):
        rewrite(model)
    # without proofs the rewrite itself needs no shapes
    res = rewrite(model, RewriteSettings(verify=False))
    assert [n.op_type for n in res.model.graph.node] == ["DeformConv"]


def test_catalog_api_unchanged():
    assert rewrite_rule_for("ai.onnx", "DCNv2").name == "dcnv2-centernet"
    assert rewrite_rule_for("mmcv", "MMCVModulatedDeformConv2d").name == "dcnv2-mmcv"
    assert rewrite_rule_for("", "DeformConv").name == "deformconv"
    assert rewrite_rule_for("", "Conv") is None


# ------------------------------------------------------------------ DCN models exported from PyTorch


def _torch_function(dialect: str):
    import torch

    class DeformConvFn(torch.autograd.Function):
        """Forward: our float64 reference; symbolic: the dialect's ONNX node."""

        @staticmethod
        def forward(ctx, x, offset, mask, weight, bias, stride, pad, dil, groups, dg):
            p = DcnParams(stride, (pad[0], pad[1], pad[0], pad[1]), dil, groups, dg)
            y = modulated_deform_conv2d(x.detach().numpy(), offset.detach().numpy(), mask.detach().numpy(),
                                        weight.detach().numpy(), bias.detach().numpy(), p)
            return torch.from_numpy(y.astype(np.float32))

        @staticmethod
        def symbolic(g, x, offset, mask, weight, bias, stride, pad, dil, groups, dg):
            if dialect == "centernet":
                return g.op("DCNv2", x, offset, mask, weight, bias, stride_i=list(stride), padding_i=list(pad),
                            dilation_i=list(dil), deformable_groups_i=dg)
            if dialect == "mmcv":
                return g.op("mmcv::MMCVModulatedDeformConv2d", x, offset, mask, weight, bias, stride_i=list(stride),
                            padding_i=list(pad), dilation_i=list(dil), groups_i=groups, deform_groups_i=dg)
            return g.op("DeformConv", x, weight, offset, bias, mask, strides_i=list(stride), pads_i=list(pad) * 2,
                        dilations_i=list(dil), group_i=groups, offset_group_i=dg)

    return DeformConvFn


def _export(dialect: str, path: Path, *, stride, pad, dil, groups, dg, cin=4, cout=6, k=3, dynamic=False,
            extra_shapes=()):
    """A DCNv2 block as real models have it: offsets and mask predicted by a conv, sigmoid mask."""
    import torch

    fn = _torch_function(dialect)
    gen = torch.Generator().manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.off = torch.nn.Conv2d(cin, dg * 3 * k * k, k, stride, pad, dil)
            with torch.no_grad():  # every parameter from the seeded generator
                self.off.weight.copy_(torch.randn(self.off.weight.shape, generator=gen))
                self.off.bias.copy_(torch.randn(self.off.bias.shape, generator=gen))
            self.weight = torch.nn.Parameter(torch.randn(cout, cin // groups, k, k, generator=gen) * 0.3)
            self.bias = torch.nn.Parameter(torch.randn(cout, generator=gen))

        def forward(self, x):
            o1, o2, m = torch.chunk(self.off(x), 3, dim=1)
            y = fn.apply(x, torch.cat([o1, o2], 1) * 2.0, torch.sigmoid(m), self.weight, self.bias,
                         stride, pad, dil, groups, dg)
            return torch.relu(y) + 1.0

    model = Block().eval()
    x = torch.randn(1, cin, 11, 13, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=19 if dialect == "onnx" else 11,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}} if dynamic else None)
    with torch.no_grad():
        if extra_shapes:
            xs = [torch.randn(*s, generator=gen) for s in extra_shapes]
            return [(a.numpy(), model(a).numpy()) for a in xs]
        return x.numpy(), model(x).numpy()


@pytest.mark.parametrize("dialect", ["centernet", "mmcv", "onnx"])
def test_pytorch_exported_dcn_models(tmp_path, dialect):
    cfg = {"centernet": dict(stride=(2, 2), pad=(1, 1), dil=(1, 1), groups=1, dg=2),
           "mmcv": dict(stride=(1, 1), pad=(2, 2), dil=(2, 2), groups=2, dg=2),
           "onnx": dict(stride=(2, 2), pad=(2, 2), dil=(2, 2), groups=2, dg=1)}[dialect]
    path = tmp_path / f"{dialect}.onnx"
    x, torch_y = _export(dialect, path, **cfg)
    exported = onnx.load(path)
    src_op = {"centernet": "DCNv2", "mmcv": "MMCVModulatedDeformConv2d", "onnx": "DeformConv"}[dialect]
    assert any(n.op_type == src_op for n in exported.graph.node)
    res = rewrite(load_model(path))
    assert [n.op_type for n in res.model.graph.node].count("DeformConv") == 1
    got = run_model(res.model, {"x": x})["y"]
    assert np.abs(got - torch_y).max() <= 1e-5
    for target in ("trt-plugin", "portable"):
        res_p = rewrite(load_model(path), RewriteSettings(dcn_target=target))
        assert all(e.proof.passed for e in res_p.report.rewrites) and len(res_p.report.rewrites) == 1
        assert res_p.report.graph_proof.method == "onnxruntime" and res_p.report.graph_proof.passed
    # portable: standard ops only, and the whole exported model still computes what PyTorch did
    assert {n.domain for n in res_p.model.graph.node} == {""} and "Gather" in {n.op_type for n in res_p.model.graph.node}
    assert np.abs(run_model(res_p.model, {"x": x})["y"] - torch_y).max() <= 1e-5


@pytest.mark.parametrize("target", ["deformconv", "trt-plugin", "portable"])
def test_dcn_rewrite_is_byte_identical(tmp_path, target):
    path = _dcn_graph(tmp_path, "centernet", stride=(2, 2), dg=2)
    runs = [rewrite(load_model(path), RewriteSettings(dcn_target=target)) for _ in range(2)]
    assert runs[0].model.SerializeToString() == runs[1].model.SerializeToString()
    assert runs[0].report.to_json() == runs[1].report.to_json()


def test_dynamic_shape_dcn_model_stays_correct_for_other_shapes(tmp_path):
    """Exported with dynamic N/H/W: the DeformConv rewrite holds for shapes the proof never saw."""
    path = tmp_path / "dyn.onnx"
    pairs = _export("mmcv", path, stride=(2, 2), pad=(1, 1), dil=(1, 1), groups=1, dg=2, dynamic=True,
                    extra_shapes=[(2, 4, 13, 15), (1, 4, 21, 8)])
    res = rewrite(load_model(path))
    assert "give --shapes" in res.report.graph_proof.reason  # dynamic: numbers need concrete shapes
    for x, y in pairs:
        assert np.abs(run_model(res.model, {"x": x})["y"] - y).max() <= 1e-5
    res2 = rewrite(load_model(path), RewriteSettings(shapes={"x": (2, 4, 13, 15)}))
    assert res2.report.graph_proof.method == "onnxruntime" and res2.report.graph_proof.passed


def test_trtconv_plugin_kernel_limit_from_the_spec():
    spec = builtin_plugin_spec()  # the one shipped inside the package
    if not spec.max_kernel_taps:
        pytest.skip("the spec states no kernel-size limit")
    k = int(np.ceil(np.sqrt(spec.max_kernel_taps + 1)))
    wt = numpy_helper.from_array(np.zeros((2, 2, k, k), np.float32), "w")
    node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "o", "m", "w"], ["y"], name="big_kernel",
                            domain="mmcv", stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1, deform_groups=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, F, None) for n in "xom"],
                          [helper.make_tensor_value_info("y", F, None)], initializer=[wt])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mmcv", 1)])
    with pytest.raises(UnsupportedModelError, match=f"big_kernel.*{k}x{k}.*limit"):
        rewrite(model, RewriteSettings(dcn_target="trtconv-plugin", dcn_plugin=spec, verify=False))


def test_trtconv_plugin_with_runtime_weight_gets_a_transpose():
    """A weight that is not an initializer (computed at run time) is re-laid out by a Transpose node."""
    spec = builtin_plugin_spec()  # the one shipped inside the package
    if spec.weight_layout != "OHWI":
        pytest.skip("the spec keeps OIHW weights")
    node = helper.make_node("DeformConv", ["x", "w", "o", "", "m"], ["y"], name="dc", pads=[1, 1, 1, 1],
                            kernel_shape=[3, 3])
    ins = [helper.make_tensor_value_info("x", F, [1, 2, 5, 6]), helper.make_tensor_value_info("w", F, [3, 2, 3, 3]),
           helper.make_tensor_value_info("o", F, [1, 18, 5, 6]), helper.make_tensor_value_info("m", F, [1, 9, 5, 6])]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    res = rewrite(model, RewriteSettings(dcn_target="trtconv-plugin", dcn_plugin=spec))
    ops = [n.op_type for n in res.model.graph.node]
    assert "Transpose" in ops and ops[-1] == spec.name
    assert res.report.rewrites[0].proof.passed
    assert res.report.graph_proof.passed  # cut at the plugin; the rest (Transpose feeds only it) compared
