"""The ``portable`` DCN target: every dialect into standard ONNX ops only (corner Gather + Gemm),
proven against the float64 reference, and checked here a second time by running the rewritten
model in ONNX Runtime ourselves (other batch sizes, offsets far outside the image, FP16)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from builders import dcn_node_model
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import AccuracyError, UnsupportedModelError
from trtconv.reference.ort import run_model
from trtconv.rewrites import DCN_TARGETS, RewriteSettings, rewrite
from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d

# Every op the portable form may emit (the test models also end with a Relu).
PORTABLE_OPS = {"Shape", "Gather", "Concat", "Range", "Cast", "Reshape", "Mul", "Sub", "Add", "Transpose", "Floor",
                "Min", "Relu", "Equal", "Where", "Slice", "Pad", "ReduceSum", "Gemm", "Conv"}
DIALECTS = ("centernet", "mmcv", "onnx")

# name: (C, Cout, k, H, W, stride, pads [t, l, b, r], dilation, group, deformable_group, mask, bias)
VARIANTS = {
    "plain": (4, 6, 3, 7, 9, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    "stride2-odd": (4, 6, 3, 9, 11, (2, 2), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    "dilation2": (4, 4, 3, 9, 8, (1, 1), (2, 2, 2, 2), (2, 2), 1, 1, True, False),
    "anisotropic": (4, 6, 3, 8, 11, (2, 1), (2, 1, 2, 1), (1, 2), 1, 1, True, True),
    "groups2": (4, 6, 3, 7, 9, (1, 1), (1, 1, 1, 1), (1, 1), 2, 1, True, True),
    "dgroups2": (4, 6, 3, 7, 9, (2, 2), (1, 1, 1, 1), (1, 1), 1, 2, True, True),
    "groups2-dgroups4": (8, 4, 3, 6, 7, (1, 2), (1, 1, 1, 1), (2, 1), 2, 4, True, True),
    "kernel2-nopad": (2, 3, 2, 5, 6, (1, 1), (0, 0, 0, 0), (1, 1), 1, 1, True, False),
    "kernel5": (2, 2, 5, 9, 10, (1, 1), (2, 2, 2, 2), (1, 1), 1, 1, True, True),
    # many channels: gathered rows of 64 and 128 values
    "channel-shares": (64, 6, 3, 7, 9, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    "channel-shares-groups": (256, 8, 3, 6, 7, (2, 1), (1, 1, 1, 1), (1, 2), 2, 2, True, True),
    # ONNX DeformConv only: asymmetric pads, no mask
    "asymmetric": (4, 2, 3, 6, 7, (2, 1), (0, 1, 2, 1), (1, 2), 2, 1, True, True),
    "nomask": (4, 6, 3, 7, 9, (1, 1), (1, 1, 1, 1), (1, 1), 1, 2, False, True),
    "nomask-nobias": (2, 3, 3, 5, 6, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, False, False),
}
ONNX_ONLY = {"asymmetric", "nomask", "nomask-nobias"}
CASES = [(d, v) for d in DIALECTS for v in VARIANTS if d == "onnx" or v not in ONNX_ONLY]


def _params(v) -> DcnParams:
    return DcnParams(v[5], v[6], v[7], v[8], v[9])


def _model(dialect: str, variant: str, **kw) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return dcn_node_model(dialect, VARIANTS[variant], **kw)


def _feeds(variant: str, n: int, seed: int = 11, offset_scale: float = 3.0, dtype=np.float32):
    c, co, k, h, w, *_rest = VARIANTS[variant]
    p = _params(VARIANTS[variant])
    dg, with_mask = VARIANTS[variant][9], VARIANTS[variant][10]
    oh, ow = p.out_hw(h, w, k, k)
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(dtype),
             # several pixels: many taps land outside the image or straddle its border
             "offset": (rng.standard_normal((n, 2 * dg * k * k, oh, ow)) * offset_scale).astype(dtype)}
    if with_mask:
        feeds["mask"] = rng.random((n, dg * k * k, oh, ow)).astype(dtype)
    return feeds


def _expected(variant: str, feeds, weights) -> np.ndarray:
    ref = modulated_deform_conv2d(feeds["x"], feeds["offset"], feeds.get("mask"), weights["weight"],
                                  weights.get("bias"), _params(VARIANTS[variant]))
    return np.maximum(ref, 0)


def _close(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-5) -> bool:
    """The proofs' rule: max |error| <= rtol * max(1, max |reference|)."""
    return got.shape == ref.shape and float(np.abs(got - ref).max()) <= rtol * max(1.0, float(np.abs(ref).max()))


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("dialect,variant", CASES, ids=[f"{d}-{v}" for d, v in CASES])
def test_portable_form_per_dialect_and_variant(dialect, variant):
    model, weights = _model(dialect, variant)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    out = res.model
    onnx.checker.check_model(out, full_check=True)
    # golden structure: standard ops of the default domain only, nothing of a plugin left
    assert {(n.domain or "") for n in out.graph.node} == {""}
    assert {n.op_type for n in out.graph.node} <= PORTABLE_OPS
    assert {o.domain for o in out.opset_import} == {""}
    assert next(o.version for o in out.opset_import if o.domain == "") == (19 if dialect == "onnx" else 16)
    c, co, k, *_ = VARIANTS[variant]
    group, dg = VARIANTS[variant][8], VARIANTS[variant][9]
    nodes = {n.name.split("/", 1)[1]: n for n in out.graph.node if "/" in n.name}
    inits = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    # one Gather of the four corners' rows from x padded by one pixel, channels last, C/dg values a row
    assert _attrs(nodes["x_padded"]) == {"mode": b"constant"}
    assert inits[nodes["x_padded"].input[1]].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]  # the conv's pads only move taps
    assert inits[nodes["x_rows"].input[1]].tolist() == [-1, c // dg]
    assert [n.op_type for n in out.graph.node].count("Pad") == 1
    blend = nodes["blend"]
    assert blend.op_type == "ReduceSum" and inits[blend.input[1]].tolist() == [5] and _attrs(blend)["keepdims"] == 0
    if group == 1:  # the product: a Gemm over [N*OH*OW, K*C] columns, the weight transposed once
        assert nodes["product"].op_type == "Gemm" and not any(n.op_type == "Conv" for n in out.graph.node)
        wk = inits[nodes["product"].input[1]]
        assert wk.shape == (k * k * c, co)
        np.testing.assert_array_equal(wk, weights["weight"].transpose(2, 3, 1, 0).reshape(k * k * c, co))
    else:  # grouped: a grouped 1x1 Conv over the columns transposed channel-first
        conv = [n for n in out.graph.node if n.op_type == "Conv"]
        assert len(conv) == 1 and _attrs(conv[0])["kernel_shape"] == [1, 1] and _attrs(conv[0])["group"] == group
        assert inits[conv[0].input[1]].shape == (co, c // group * k * k, 1, 1)
    assert ("modulate" in nodes) == VARIANTS[variant][10]  # the mask, folded into the corner weights
    # the proof ran in ONNX Runtime against the reference, at the model's own size
    entry = res.report.rewrites[0]
    assert entry.target == "portable" and entry.proof.method == "onnxruntime" and entry.proof.passed
    assert entry.proof.max_abs is not None and entry.proof.max_abs <= 1e-5
    assert entry.proof.shapes["x"] == (1, c, VARIANTS[variant][3], VARIANTS[variant][4])
    assert not any("Pad" in n or "swap h and w" in n for n in entry.notes)
    assert res.report.graph_proof.passed and res.report.graph_proof.method == "onnxruntime"
    # and once more by hand, at batch 2 (the model said 1, but nothing in the form fixes the batch)
    free = onnx.ModelProto()
    free.CopyFrom(out)
    for vi in free.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    feeds = _feeds(variant, 2)
    got = run_model(free, feeds)["y"]
    assert _close(got, _expected(variant, feeds, weights))


def test_dynamic_batch_stays_dynamic():
    model, weights = _model("mmcv", "groups2-dgroups4", batch="N")
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    assert res.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    for n in (1, 3):
        feeds = _feeds("groups2-dgroups4", n, seed=n)
        got = run_model(res.model, feeds)["y"]
        assert got.shape[0] == n
        assert _close(got, _expected("groups2-dgroups4", feeds, weights))


def test_offsets_outside_the_image_sample_zeros():
    """Every tap pushed far outside gives bias alone; taps half a pixel past the border keep half."""
    model, weights = _model("onnx", "plain")
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    feeds = _feeds("plain", 1)
    # H=7, W=9: 7.5 rows/cols down-right is outside for every tap; shifts of 1-1.5 pixels put the
    # floored positions of the border taps on -2, -1, H-1 and H, either side of the clamp
    for far in (100.0, -100.0, 7.5, -8.0, 1.0, -1.0, 1.5, -1.5, 0.999):
        f = dict(feeds, offset=np.full_like(feeds["offset"], far))
        got = run_model(res.model, f)["y"]
        expected = np.maximum(np.broadcast_to(weights["bias"].reshape(1, -1, 1, 1), got.shape), 0)
        if far in (100.0, -100.0):
            assert np.array_equal(got, expected)
        assert _close(got, _expected("plain", f, weights))
    f = dict(feeds, offset=np.where(np.arange(feeds["offset"].shape[1])[None, :, None, None] % 2, -0.5, 0.5)
             .astype(np.float32) * np.ones_like(feeds["offset"]))
    assert _close(run_model(res.model, f)["y"], _expected("plain", f, weights))


@pytest.mark.parametrize("variant", ["plain", "dgroups2"])
def test_sample_arithmetic_gathers_nothing_but_the_corners(variant):
    """The corner indices and weights are one pass of arithmetic over the offsets: the y and x
    of the positions are taken apart by Slice, and the only Gathers are the corner Gather and
    those reading shape vectors. A Gather of one entry of a computed pair makes a fusing
    compiler write the pair out first (four kernels for this step in Inductor)."""
    model, _ = _model("mmcv", variant)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim)
             for vi in onnx.shape_inference.infer_shapes(res.model).graph.value_info}
    gathers = [n for n in res.model.graph.node if n.op_type == "Gather" and not n.name.endswith("/sample")]
    assert gathers and all(ranks[n.input[0]] == 1 for n in gathers), [(n.name, ranks[n.input[0]]) for n in gathers]
    assert [n.name.split("/")[-1] for n in res.model.graph.node if n.op_type == "ReduceSum"] == ["blend"]
    # y and x taken apart once, at the positions, by Slice (read in place)
    assert sorted(n.name.split("/")[-1] for n in res.model.graph.node if n.op_type == "Slice") == ["position_x",
                                                                                                   "position_y"]


@pytest.mark.parametrize("variant", ["dgroups2", "channel-shares-groups", "plain"])
def test_fp16_positions_in_fp32_corners_and_product_in_fp16(variant):
    model, weights = _model("mmcv", variant, dtype=np.float16)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    nodes = {n.name.split("/", 1)[1]: n for n in res.model.graph.node if "/" in n.name}
    info = {vi.name: vi.type.tensor_type.elem_type
            for vi in onnx.shape_inference.infer_shapes(res.model).graph.value_info}
    # positions, fractions and the corner weights (mask folded in) in FP32, then cast down once
    assert info[nodes["floor_y"].output[0]] == info[nodes["corner_weights"].output[0]] == TensorProto.FLOAT
    assert _attrs(nodes["corner_weights_cast"])["to"] == TensorProto.FLOAT16
    # the corner indices are INT32; the gathered rows, their blend and the product FP16
    assert info[nodes["corner_rows"].output[0]] == TensorProto.INT32
    assert info[nodes["sample"].output[0]] == info[nodes["blend"].output[0]] == TensorProto.FLOAT16
    product = nodes["product"] if VARIANTS[variant][8] == 1 else next(n for n in res.model.graph.node
                                                                       if n.op_type == "Conv")
    assert info[product.input[0]] == TensorProto.FLOAT16
    proof = res.report.rewrites[0].proof
    assert proof.passed and proof.stats[0].max_abs > 0  # computed in FP16, not silently in FP32
    assert res.report.graph_proof.passed and "cut at 1" in res.report.graph_proof.reason
    feeds = _feeds(variant, 1, dtype=np.float16)
    got = run_model(res.model, feeds)["y"].astype(np.float64)
    ref = _expected(variant, feeds, weights)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("spatial", [True, False], ids=["static", "dynamic"])
def test_stacked_dcn_layers_get_the_shape_of_the_first(spatial):
    """The second DCN reads the first's output (through a ReLU), whose shape only the rewrite
    knows (custom op): its channel count, and its spatial size when static."""
    model, weights = _model("mmcv", "plain", batch=1 if spatial else "N", spatial=spatial)
    g = model.graph
    rng = np.random.default_rng(9)
    g.initializer.append(numpy_helper.from_array((rng.standard_normal((6, 6, 3, 3)) * 0.2).astype(np.float32), "w2"))
    second = helper.make_node("MMCVModulatedDeformConv2d", ["y", "offset", "mask", "w2"], ["dcn2"], name="dcn1",
                              domain="mmcv", stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1)
    g.node.append(second)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("dcn2", TensorProto.FLOAT, None))
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    assert len(res.report.rewrites) == 2 and all(e.proof.passed for e in res.report.rewrites)
    assert res.report.rewrites[1].proof.shapes["x"][:2] == (1, 6)
    feeds = _feeds("plain", 1)
    first = _expected("plain", feeds, weights)
    ref = modulated_deform_conv2d(first, feeds["offset"], feeds["mask"], numpy_helper.to_array(g.initializer[-1]),
                                  None, DcnParams(pads=(1, 1, 1, 1)))
    assert _close(run_model(res.model, feeds)["dcn2"], ref)


@pytest.mark.parametrize("opset", [20, 22])
def test_newer_opsets_keep_their_version(opset):
    """The form needs opset 16 at most; newer opsets stay as they are."""
    model, weights = _model("onnx", "anisotropic", opset=opset)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    assert next(o.version for o in res.model.opset_import if o.domain == "") == opset
    feeds = _feeds("anisotropic", 1)
    assert _close(run_model(res.model, feeds)["y"], _expected("anisotropic", feeds, weights))


@pytest.mark.parametrize("dialect,variant", [("mmcv", "stride2-odd"), ("centernet", "dilation2"),
                                             ("mmcv", "groups2-dgroups4"), ("onnx", "asymmetric"),
                                             ("onnx", "nomask")])
def test_dynamic_spatial_sizes(dialect, variant):
    """Dynamic H and W: tap positions from Range over the offset's run-time size; one graph, any size."""
    model, weights = _model(dialect, variant, batch="N", spatial=False)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    ops = [n.op_type for n in res.model.graph.node]
    assert "Range" in ops and "Gather" in ops and {n.domain for n in res.model.graph.node} == {""}
    assert res.report.rewrites[0].proof.passed and res.report.rewrites[0].proof.method == "onnxruntime"
    c, co, k, h, w, stride, pads, dil, group, dg, with_mask, with_bias = VARIANTS[variant]
    p = _params(VARIANTS[variant])
    rng = np.random.default_rng(5)
    for n, hh, ww in ((1, h, w), (2, h + 5, w - 1), (3, 2 * h + 1, 3 * w)):
        oh, ow = p.out_hw(hh, ww, k, k)
        feeds = {"x": rng.standard_normal((n, c, hh, ww)).astype(np.float32),
                 "offset": (rng.standard_normal((n, 2 * dg * k * k, oh, ow)) * 3).astype(np.float32)}
        if with_mask:
            feeds["mask"] = rng.random((n, dg * k * k, oh, ow)).astype(np.float32)
        got = run_model(res.model, feeds)["y"]
        assert _close(got, _expected(variant, feeds, weights))


def test_dynamic_fp16_sizes():
    model, weights = _model("mmcv", "dgroups2", batch="N", spatial=False, dtype=np.float16)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    assert res.report.rewrites[0].proof.passed
    feeds = _feeds("dgroups2", 2, dtype=np.float16)
    ref = _expected("dgroups2", feeds, weights)
    assert np.abs(run_model(res.model, feeds)["y"].astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


def test_unknown_channel_count_is_a_clear_error():
    model, _ = _model("mmcv", "plain", batch="N", spatial=False)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    model.graph.initializer.pop(0)  # the weight too: nothing tells the channel count
    model.graph.input.append(helper.make_tensor_value_info("weight", TensorProto.FLOAT, ["O", "I", 3, 3]))
    with pytest.raises(UnsupportedModelError, match="channel count") as err:
        rewrite(model, RewriteSettings(dcn_target="portable", verify=False))
    assert "--shapes" in (err.value.hint or "")


def test_as_accurate_as_onnxruntimes_deformconv_on_a_large_map():
    """Float32 positions lose ~size * 2^-24 pixels in any implementation, so the error grows with
    the feature map: the node proof runs at most 64x64, and here, at 200x200, the portable form
    stays level with ONNX Runtime's own float32 DeformConv (measured equal up to 256x256, 1.1x
    at 384x384; the first version of the grid arithmetic measured 2.6-4.3x worse at 100-200 px)."""
    c, hw = 16, 200
    spec = (c, c, 3, hw, hw, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True)
    model, weights = dcn_node_model("onnx", spec)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32),
             "offset": (rng.standard_normal((1, 18, hw, hw)) * 2.5).astype(np.float32),
             "mask": rng.random((1, 9, hw, hw)).astype(np.float32)}
    ref = np.maximum(modulated_deform_conv2d(feeds["x"], feeds["offset"], feeds["mask"], weights["weight"],
                                             weights["bias"], DcnParams(pads=(1, 1, 1, 1))), 0)
    ours = np.abs(run_model(res.model, feeds)["y"] - ref).max()
    ort = np.abs(run_model(model, feeds)["y"] - ref).max()
    assert 0 < ours <= 1.5 * ort
    assert res.report.rewrites[0].proof.shapes["x"] == (1, c, 64, 64)


def test_tight_tolerance_fails_and_writes_nothing(tmp_path):
    model, _ = _model("centernet", "plain")
    with pytest.raises(AccuracyError, match="portable"):
        rewrite(model, RewriteSettings(dcn_target="portable", node_tolerance=1e-12))


def test_portable_is_a_listed_target():
    assert "portable" in DCN_TARGETS


def test_cli_exit_codes(tmp_path):
    model, _ = _model("mmcv", "dgroups2")
    src = tmp_path / "in.onnx"
    onnx.save(model, src)
    out = tmp_path / "out.onnx"
    r = CliRunner().invoke(cli, ["rewrite", str(src), "-o", str(out), "--dcn-target", "portable", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["settings"]["dcn_target"] == "portable"
    rw = doc["rewrites"][0]
    assert rw["target"] == "portable" and rw["proof"]["passed"] and rw["proof"]["method"] == "onnxruntime"
    assert {a["op"] for a in rw["after"]} <= PORTABLE_OPS and out.is_file()
    # the result has nothing left to rewrite: check says so
    chk = CliRunner().invoke(cli, ["check", str(out), "--json"])
    assert chk.exit_code == 0, chk.output
    # channel count unknown: exit 5, one line, nothing written
    dyn, _ = _model("mmcv", "dgroups2", batch="N", spatial=False)
    dyn.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    dyn.graph.initializer.pop(0)
    dyn.graph.input.append(helper.make_tensor_value_info("weight", TensorProto.FLOAT, ["O", "I", 3, 3]))
    src2, out2 = tmp_path / "dyn.onnx", tmp_path / "dyn.out.onnx"
    onnx.save(dyn, src2)
    r2 = CliRunner().invoke(cli, ["rewrite", str(src2), "-o", str(out2), "--dcn-target", "portable"])
    assert r2.exit_code == 5 and "channel count" in r2.output and "--shapes" in r2.output
    assert "Traceback" not in r2.output and not out2.exists()
    r3 = CliRunner().invoke(cli, ["rewrite", str(src2), "-o", str(out2), "--dcn-target", "portable",
                                  "--shapes", "x:1x4x7x9,weight:6x4x3x3"])
    assert r3.exit_code == 0, r3.output
    # a proof that cannot pass: exit 7, nothing written
    out4 = tmp_path / "tight.onnx"
    r4 = CliRunner().invoke(cli, ["rewrite", str(src), "-o", str(out4), "--dcn-target", "portable",
                                  "--tolerance", "1e-12"])
    assert r4.exit_code == 7 and not out4.exists()
