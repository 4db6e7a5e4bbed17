"""trtconv::DCNv2 plugin facts without a GPU, and the plugin end to end under TensorRT (`trt`).

The CPU tests check what the rewrite stage and TensorRT rely on: the spec's names match
the registered plugin, fields validate with clear errors, the output-shape rule and the
launch geometry agree with the convolution arithmetic, and the plugin module stays out of
``import trtconv``.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trtconv.errors import InvalidModelError, UnsupportedModelError
from trtconv.rewrites.dcn.plugin_spec import builtin_spec_document
from trtconv.trt.plugins import dcnv2_kernel as dk

ROOT = Path(__file__).resolve().parents[2]
SPEC = builtin_spec_document()


def test_spec_names_match_the_code():
    assert SPEC["plugin"]["id"] == dk.PLUGIN_ID == f"{SPEC['plugin']['namespace']}::{SPEC['plugin']['name']}"
    assert SPEC["plugin"]["version"] == dk.PLUGIN_VERSION
    assert [i["name"] for i in SPEC["inputs"]] == ["x", "offset", "mask", "weight", "bias"]
    assert SPEC["onnx_node"]["required_attributes"]["plugin_namespace"] == dk.PLUGIN_NAMESPACE
    assert set(SPEC["dtypes"]["supported"]) == set(dk.DTYPES)
    # The plugin's fields are the spec's attributes, in order (tensorrt.plugin reads the signature).
    src = (ROOT / "trtconv" / "trt" / "plugins" / "dcnv2.py").read_text()
    sig = src[src.index("def dcnv2_desc(") : src.index(") -> trtp.TensorDesc:")]
    fields = [ln.split(":")[0].strip() for ln in sig.splitlines()[1:] if ":" in ln and "TensorDesc" not in ln]
    assert fields == [a["name"] for a in SPEC["attributes"]]
    defaults = {a["name"]: a["default"] for a in SPEC["attributes"]}
    attrs = dk.DCNv2Attrs()
    assert list(attrs.stride) == defaults["stride"] and list(attrs.pads) == defaults["pads"]
    assert list(attrs.dilation) == defaults["dilation"] and attrs.group == defaults["group"]
    assert attrs.deformable_group == defaults["deformable_group"] and int(attrs.allow_tf32) == defaults["allow_tf32"]


def test_fields_from_tensorrt_arrays():
    a = dk.DCNv2Attrs.from_fields(
        np.array([2, 1], np.int32), np.array([1, 2, 3, 4], np.int32), np.array([1, 3], np.int32), 2, 4, 0
    )
    assert a == dk.DCNv2Attrs((2, 1), (1, 2, 3, 4), (1, 3), 2, 4, False)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"stride": (0, 1)}, "stride"),
        ({"pads": (1, 1)}, "pads"),
        ({"dilation": (1, -1)}, "dilation"),
        ({"group": 0}, "group"),
        ({"deformable_group": 0}, "deformable_group"),
    ],
)
def test_bad_fields_are_clear_errors(kwargs, word):
    with pytest.raises(InvalidModelError, match=word) as err:
        dk.DCNv2Attrs(**kwargs)
    assert err.value.hint


def test_output_shape_rule_matches_convolution():
    torch = pytest.importorskip("torch")
    for h, w, kh, kw, attrs in [
        (17, 23, 3, 3, dk.DCNv2Attrs(pads=(1, 1, 1, 1))),
        (31, 29, 3, 3, dk.DCNv2Attrs((2, 2), (2, 2, 2, 2), (2, 2))),
        (20, 33, 3, 5, dk.DCNv2Attrs((1, 2), (0, 3, 2, 1), (2, 1))),
    ]:
        pt, pl, pb, pr = attrs.pads
        x = torch.nn.functional.pad(torch.zeros(1, 1, h, w), (pl, pr, pt, pb))
        y = torch.nn.functional.conv2d(x, torch.zeros(1, 1, kh, kw), stride=attrs.stride, dilation=attrs.dilation)
        assert dk.output_hw(h, w, kh, kw, attrs) == tuple(y.shape[2:])


def test_check_shapes_reports_every_mismatch():
    attrs = dk.DCNv2Attrs(pads=(1, 1, 1, 1), group=2, deformable_group=2)
    assert dk.check_shapes((2, 8, 5, 6), (2, 36, 5, 6), (2, 18, 5, 6), (4, 3, 3, 4), (4,), attrs) == (5, 6)
    with pytest.raises(InvalidModelError) as err:
        dk.check_shapes((2, 8, 5, 6), (2, 18, 5, 6), (2, 18, 5, 7), (4, 3, 3, 8), (5,), attrs)
    msg = str(err.value)
    assert "offset" in msg and "mask" in msg and "bias" in msg and "C/group" in msg
    with pytest.raises(UnsupportedModelError, match="int32"):
        dk.check_shapes((4096, 1024, 32, 32), (4096, 18, 32, 32), (4096, 9, 32, 32), (8, 3, 3, 1024), (8,),
                        dk.DCNv2Attrs(pads=(1, 1, 1, 1)))


def test_launch_geometry_covers_every_output():
    for m, coutg, group in [(1, 1, 1), (16384, 64, 1), (32768, 256, 1), (1024, 512, 1), (433, 24, 4)]:
        for tile in dk.ALL_TILES:
            gx, gy, gz = dk.grid(m, coutg, group, tile)
            tiles_m, rest = divmod(gx, dk.split_k(tile))  # split-K: KS CTAs per pixel tile
            assert rest == 0 and tiles_m * tile[0] >= m > (tiles_m - 1) * tile[0]
            assert gy * tile[1] >= coutg > (gy - 1) * tile[1] and gz == group
        assert dk.pick_tile(m, coutg, group) in dk.TILES
    assert dk.tactic_tile(0) == dk.TILES[0] and dk.tactic_tile(len(dk.TILES)) == dk.TILES[-1]
    assert dk.tactic_tile(len(dk.ALL_TILES)) == dk.SM90_TILES[-1]
    # One warpgroup (128 threads) per 64 pixels for the "w" wgmma entries, two for "v", 256
    # threads for the compute_80 ones; split-K only where the entry name says so.
    assert [(dk.tile_id(t), dk.threads(t), dk.split_k(t)) for t in dk.SM90_TILES] == [
        ("m128n256k64v", 512, 1), ("m128n256k64v2", 512, 2), ("m64n256k64v6", 256, 6),
        ("m64n128k64v6", 256, 6), ("m128n128k64wx4", 256, 1), ("m64n64k64w2x2", 128, 2),
    ]
    assert {dk.threads(t) for t in dk.TILES} == {dk.THREADS} and {dk.split_k(t) for t in dk.TILES} == {1}
    assert {dk.ptx_file(dk.kernel_name("float16", t)) for t in dk.SM90_TILES} == {dk.SM90_PTX_FILE}
    assert {dk.ptx_file(dk.kernel_name("float16", t)) for t in dk.TILES} == {dk.PTX_FILE}


def test_hopper_tiles_only_where_they_run():
    """compute_90a PTX runs on compute capability 9.0 alone, and has no FP32-accurate entry."""
    assert dk.usable_tiles((9, 0)) == dk.ALL_TILES
    for cc in [(8, 0), (8, 7), (8, 9), (10, 0), (12, 0), None]:
        assert dk.usable_tiles(cc) == dk.TILES
    assert dk.usable_tiles((9, 0), accurate_fp32=True) == dk.TILES
    assert dk.usable_tiles((9, 0), portable=True) == dk.TILES
    # The heuristic reproduces the benchmark's winners on the three reference layers.
    assert dk.pick_tile(16384, 64, 1) == (64, 64, 64, 0)
    assert dk.pick_tile(32768, 256, 1) == (64, 128, 32, 0)
    assert dk.pick_tile(1024, 512, 1) == (64, 64, 64, 0)


def test_kernel_names_follow_dtype_and_math():
    assert dk.kernel_name("float32", (64, 64, 64, 0)) == "dcnv2_tf32_nchw_m64n64k64s"
    assert dk.kernel_name("float32", (64, 64, 64, 2), allow_tf32=False, layout="nhwc") == "dcnv2_f32_nhwc_m64n64k64t"
    assert dk.kernel_name("bfloat16", (32, 128, 32, 0)) == "dcnv2_bf16_nchw_m32n128k32s"
    assert dk.kernel_name("float16", (64, 256, 16, 1), layout="nhwc") == "dcnv2_f16_nhwc_m64n256k16p"
    with pytest.raises(UnsupportedModelError, match="int8"):
        dk.kernel_name("int8", (64, 64, 64, 0))
    with pytest.raises(ValueError, match="no kernel for tile"):
        dk.kernel_name("float16", (32, 64, 64, 1))


def test_plugin_module_is_import_safe_and_annotated_for_tensorrt():
    code = (
        "import sys, trtconv, trtconv.trt.plugins, trtconv.trt.plugins.dcnv2_kernel, trtconv.trt.plugins.dcnv2\n"
        "print(any(k == 'tensorrt' or k.startswith('tensorrt.') for k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    from trtconv.trt.plugins import dcnv2

    # tensorrt.plugin inspects real annotation objects: no postponed (string) annotations
    # (`from __future__ import annotations` would also bind the module name `annotations`).
    assert not hasattr(dcnv2, "annotations")
    assert "trtp.TensorDesc" in inspect.getsource(dcnv2.ensure_registered)


@pytest.mark.trt
def test_plugin_in_a_tensorrt_engine(tmp_path):
    """Parse an ONNX DCNv2 node, build an AOT engine, run it, compare with the float64 reference."""
    import tensorrt as trt
    import torch
    from onnx import TensorProto, helper, numpy_helper

    from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d
    from trtconv.trt.plugins import dcnv2

    dcnv2.ensure_registered()
    g = torch.Generator().manual_seed(0)
    n, c, cout, h, w = 2, 16, 24, 19, 21
    x = torch.randn(n, c, h, w, generator=g).half()
    off = (2 * torch.randn(n, 18, h, w, generator=g)).half()
    msk = torch.sigmoid(torch.randn(n, 9, h, w, generator=g)).half()
    wt = (torch.randn(cout, c, 3, 3, generator=g) / 12).half()
    b = torch.randn(cout, generator=g).half()
    node = helper.make_node(
        "DCNv2", ["x", "offset", "mask", "weight", "bias"], ["y"], domain="trtconv", plugin_namespace="trtconv",
        aot=1, stride=[1, 1], pads=[1, 1, 1, 1], dilation=[1, 1], group=1, deformable_group=1, allow_tf32=1,
    )
    f16 = TensorProto.FLOAT16
    graph = helper.make_graph(
        [node], "dcn",
        [helper.make_tensor_value_info(k, f16, list(v.shape)) for k, v in (("x", x), ("offset", off), ("mask", msk))],
        [helper.make_tensor_value_info("y", f16, [n, cout, h, w])],
        [numpy_helper.from_array(wt.permute(0, 2, 3, 1).contiguous().numpy(), "weight"),
         numpy_helper.from_array(b.numpy(), "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("trtconv", 1)])
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(model.SerializeToString())
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    assert plan is not None
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    ctx = engine.create_execution_context()
    dev = {k: v.cuda().contiguous() for k, v in (("x", x), ("offset", off), ("mask", msk))}
    y = torch.full((n, cout, h, w), float("nan"), dtype=torch.half, device="cuda")
    for k, v in dev.items():
        ctx.set_tensor_address(k, v.data_ptr())
    ctx.set_tensor_address("y", y.data_ptr())
    assert ctx.execute_async_v3(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref = torch.from_numpy(modulated_deform_conv2d(x.double().numpy(), off.double().numpy(), msk.double().numpy(),
                                                   wt.double().numpy(), b.double().numpy(), DcnParams(pads=(1, 1, 1, 1))))
    err = float((y.cpu().double() - ref).norm() / ref.norm())
    assert err <= 2e-3


def test_plugin_tactics_follow_gpu_mode_and_portability():
    """The autotune tactic numbers: compute_80 tiles always, the wgmma ones only where they run."""
    from trtconv.trt.plugins import dcnv2 as plugin

    base = list(range(1, len(dk.TILES) + 1))
    assert plugin.tactics(True, (9, 0), portable=False) == list(range(1, len(dk.ALL_TILES) + 1))
    assert plugin.tactics(False, (9, 0), portable=False) == base  # FP32-accurate: no wgmma entry
    assert plugin.tactics(True, (9, 0), portable=True) == base  # hardware-compatible engine
    assert plugin.tactics(True, (8, 9), portable=False) == base
    assert plugin.tactics(True, None, portable=False) == base  # capability unknown
    assert all(dk.tactic_tile(t) in dk.SM90_TILES for t in plugin.tactics(True, (9, 0), False)[len(base):])
