"""The portable DCN form through TensorRT-RTX's real ONNX parser and builder, on the CPU.

TensorRT-RTX has no plugins (../shared/docs/trt-rtx-facts.md): ONNX DeformConv fails there
with "Plugin not found". The portable form must parse and build with a dynamic batch.
Runs wherever `pip install tensorrt-rtx` works (no GPU needed); skips elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import dcn_node_model

from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.dcn.deform_math import DcnParams

trt = pytest.importorskip("tensorrt_rtx")

# (C, Cout, k, H, W, stride, pads [t, l, b, r], dilation, group, deformable_group, mask, bias)
SPECS = {
    "plain": (8, 16, 3, 20, 24, (1, 1), (1, 1, 1, 1), (1, 1), 1, 1, True, True),
    "groups-dgroups-stride": (8, 8, 3, 19, 23, (2, 2), (1, 1, 1, 1), (1, 1), 2, 4, True, True),
    "anisotropic-dilation": (4, 6, 3, 16, 21, (2, 1), (2, 1, 2, 1), (2, 1), 1, 2, True, False),
    "asymmetric-nomask": (4, 4, 3, 15, 17, (1, 2), (0, 1, 2, 1), (1, 2), 2, 1, False, True),
    # 128 channels per deformable group: GridSample's batch holds 4 channel shares of each
    "channel-shares": (256, 16, 3, 12, 14, (1, 1), (1, 1, 1, 1), (1, 1), 1, 2, True, True),
}
CASES = [("centernet", "plain"), ("mmcv", "groups-dgroups-stride"), ("mmcv", "anisotropic-dilation"),
         ("onnx", "plain"), ("onnx", "asymmetric-nomask"), ("onnx", "groups-dgroups-stride"),
         ("mmcv", "channel-shares")]


def _parse(path: Path):
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(path))
    errors = [parser.get_error(i).desc() for i in range(parser.num_errors)]
    return builder, network, ok, errors, parser


def _build(builder, network, batch=(1, 2, 4)) -> bytes | None:
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        t = network.get_input(i)
        dims = tuple(t.shape)
        profile.set_shape(t.name, *(tuple(b if d == -1 else d for d in dims) for b in batch))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    return None if plan is None else bytes(plan)


def _portable(tmp_path: Path, dialect: str, spec: str, dtype=np.float32) -> Path:
    model, _ = dcn_node_model(dialect, SPECS[spec], batch="N", dtype=dtype)
    res = rewrite(model, RewriteSettings(dcn_target="portable", shapes={"x": (1, *SPECS[spec][:1],
                                                                              *SPECS[spec][3:5])}))
    assert all(e.proof.passed for e in res.report.rewrites)
    out = res.model
    for vi in out.graph.input:  # --shapes fixed the batch for the proof; the engine keeps it dynamic
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path / f"{dialect}-{spec}.portable.onnx"
    onnx.save(out, path)
    return path


@pytest.mark.parametrize("dialect,spec", CASES, ids=[f"{d}-{s}" for d, s in CASES])
def test_portable_form_parses_and_builds_on_rtx(tmp_path, dialect, spec):
    builder, network, ok, errors, _parser = _parse(_portable(tmp_path, dialect, spec))
    assert ok and errors == []
    kinds = {network.get_layer(i).type for i in range(network.num_layers)}
    product = trt.LayerType.MATRIX_MULTIPLY if SPECS[spec][8] == 1 else trt.LayerType.CONVOLUTION
    assert trt.LayerType.GATHER in kinds and product in kinds and trt.LayerType.GRID_SAMPLE not in kinds
    assert trt.LayerType.PLUGIN_V3 not in kinds and trt.LayerType.PLUGIN_V2 not in kinds
    assert network.get_input(0).shape[0] == -1  # the batch stayed dynamic
    plan = _build(builder, network)
    assert plan is not None and len(plan) > 0


@pytest.mark.parametrize("spec", ["plain", "groups-dgroups-stride"])
def test_fp16_portable_form_builds_in_fp16_on_rtx(tmp_path, spec):
    """Strongly typed: positions and weights in FP32, the gathered corners, their blend and the
    product in FP16, the corner indices INT32."""
    builder, network, ok, errors, _parser = _parse(_portable(tmp_path, "mmcv", spec, np.float16))
    assert ok and errors == []
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    sample = next(la for la in layers if la.type == trt.LayerType.GATHER and la.name.endswith("/sample"))
    floor = next(la for la in layers if la.type == trt.LayerType.UNARY and la.get_input(0).dtype == trt.DataType.FLOAT)
    assert floor.get_output(0).dtype == trt.DataType.FLOAT
    assert sample.get_input(0).dtype == sample.get_output(0).dtype == trt.DataType.HALF
    assert sample.get_input(1).dtype == trt.DataType.INT32
    product = next(la for la in layers if la.type in (trt.LayerType.MATRIX_MULTIPLY, trt.LayerType.CONVOLUTION)
                   and la.get_output(0).dtype == trt.DataType.HALF)
    assert product.type == (trt.LayerType.MATRIX_MULTIPLY if SPECS[spec][8] == 1 else trt.LayerType.CONVOLUTION)
    plan = _build(builder, network)
    assert plan is not None and len(plan) > 0


@pytest.mark.parametrize("dialect,spec", [("mmcv", "groups-dgroups-stride"), ("onnx", "asymmetric-nomask")])
def test_dynamic_spatial_portable_form_builds_on_rtx(tmp_path, dialect, spec):
    """Dynamic N, H and W with a profile spanning several sizes: tap positions come from Range."""
    model, _ = dcn_node_model(dialect, SPECS[spec], batch="N", spatial=False)
    res = rewrite(model, RewriteSettings(dcn_target="portable"))
    assert res.report.rewrites[0].proof.passed
    path = tmp_path / "dynamic.onnx"
    onnx.save(res.model, path)
    builder, network, ok, errors, _parser = _parse(path)
    assert ok and errors == []
    c, _co, k, *_ = SPECS[spec]
    p = DcnParams(*SPECS[spec][5:10])
    dg = p.deformable_group
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    corners = [(1, 12, 14), (2, 20, 24), (4, 33, 40)]
    dims = {"x": [], "offset": [], "mask": []}
    for n, h, w in corners:
        oh, ow = p.out_hw(h, w, k, k)
        dims["x"].append((n, c, h, w))
        dims["offset"].append((n, 2 * dg * k * k, oh, ow))
        dims["mask"].append((n, dg * k * k, oh, ow))
    for i in range(network.num_inputs):
        name = network.get_input(i).name
        profile.set_shape(name, *dims[name])
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None and plan.nbytes > 0


def test_deformconv_needs_a_plugin_rtx_does_not_have(tmp_path):
    """Why the portable target exists: the same node as ONNX DeformConv does not parse on RTX."""
    model, _ = dcn_node_model("onnx", SPECS["plain"], batch="N")
    path = tmp_path / "deformconv.onnx"
    onnx.save(model, path)
    _builder, _network, ok, errors, parser = _parse(path)
    assert not ok and any("plugin" in e.lower() for e in errors)
    assert parser.get_error(0).node_operator() == "DeformConv"


class _Lines(trt.ILogger):
    def __init__(self) -> None:
        trt.ILogger.__init__(self)
        self.lines: list[str] = []

    def log(self, severity, msg) -> None:  # noqa: ARG002 - every severity, the layer listing is INFO/VERBOSE
        self.lines.append(msg)


def test_rtx_fuses_the_corner_gather_with_its_blend(tmp_path):
    """The form is fast only if the runtime fuses the corner Gather into its blend (node by node
    the Gather writes four times the columns): TensorRT-RTX's builder makes one generated kernel
    from the offsets to the blended columns, a second for the Gemm, a third for the output."""
    path = _portable(tmp_path, "mmcv", "plain", np.float16)
    logger = _Lines()
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(path))
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        dims = tuple(network.get_input(i).shape)
        profile.set_shape(network.get_input(i).name, *(tuple(2 if d == -1 else d for d in dims),) * 3)
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is not None
    # the engine's layer listing: one "Name: ..., LayerType: ..." line per kernel
    kernels = [ln for msg in logger.lines for ln in msg.splitlines() if ln.startswith("Name: ") and "LayerType: " in ln]
    gather = [k for k in kernels if "/sample]" in k]
    assert len(gather) == 1 and "/blend]" in gather[0] and "/corner_rows]" in gather[0] and "/floor_y]" in gather[0]
    assert len(kernels) <= 3, kernels
