"""RoiAlign without a plugin for TensorRT-RTX (trtconv/rewrites/detection/roi_align.py): proven against
ONNX Runtime's RoiAlign; applied only where the target needs it; the real RTX parser refuses the
original ("ROIAlign plugin was not found") and takes the rewrite."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import AccuracyError
from trtconv.load import save_model
from trtconv.reference.ort import run_model
from trtconv.rewrites import RewriteSettings, rewrite
from trtconv.rewrites.detection.roi_align import RoiAlignRule

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None
RTX = RewriteSettings(target="rtx")


def roi_model(opset: int = 16, ctm: str | None = None, n: int = 1, computed_index: bool = True) -> onnx.ModelProto:
    """Features [n, 8, 20, 24] and boxes [R, 4]; batch indices computed as zeros (as detectors export
    them) or given as an input."""
    attrs = {"output_height": 7, "output_width": 5, "sampling_ratio": 2, "spatial_scale": 0.25}
    if ctm:
        attrs["coordinate_transformation_mode"] = ctm
    nodes = [helper.make_node("RoiAlign", ["feat", "rois", "idx"], ["y"], name="roi", **attrs)]
    inputs = [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [n, 8, 20, 24]),
              helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 4])]
    if computed_index:
        nodes[:0] = [helper.make_node("Shape", ["rois"], ["s"], end=1),
                     helper.make_node("ConstantOfShape", ["s"], ["idx"],
                                      value=numpy_helper.from_array(np.array([0], np.int64)))]
    else:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, ["R"]))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(n: int, with_index: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    xy = rng.uniform(-12, 100, (9, 2))  # boxes partly or wholly outside the 96x80 image (scale 0.25)
    feeds = {"feat": rng.standard_normal((n, 8, 20, 24)).astype(np.float32),
             "rois": np.concatenate([xy, xy + rng.uniform(0.5, 40, (9, 2))], axis=1).astype(np.float32)}
    if with_index:
        feeds["idx"] = rng.integers(0, n, 9).astype(np.int64)
    return feeds


@pytest.mark.parametrize("opset, ctm, n", [(16, None, 1), (16, "output_half_pixel", 2), (13, None, 1),
                                           (18, "half_pixel", 2), (10, None, 2)])
def test_roi_align_becomes_gathered_corners_and_a_mean(opset, ctm, n):
    computed = n == 1 and opset >= 15  # Shape's end attribute: opset 15
    model = roi_model(max(opset, 16), ctm, n, computed_index=computed)
    model.opset_import[0].version = opset
    res = rewrite(model, RTX)
    (e,) = res.report.rewrites
    assert (e.rule, e.proof.method, e.proof.passed) == ("roialign-portable", "onnxruntime", True)
    assert e.proof.max_abs < 1e-6  # ONNX Runtime's own arithmetic, in its order
    ops = {o.op_type for o in res.model.graph.node}
    assert "RoiAlign" not in ops and {"Gather", "ReduceSum"} <= ops
    assert res.report.opset_after == opset  # nothing newer than the model's opset is needed
    feeds = _feeds(n, not computed)
    ref, got = run_model(model, feeds)["y"], run_model(res.model, feeds)["y"]
    assert ref.shape == got.shape == (9, 8, 7, 5)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * max(1.0, float(np.abs(ref).max())))


def test_constant_boxes_and_indices_are_proven_as_the_model_holds_them():
    """Boxes and image indices held as initializers (anchors, a fixed crop set): the proof fed random boxes
    of its own count, ONNX Runtime refused ("Shape of initializer ... does not match") and the rewrite
    always stepped aside."""
    rng = np.random.default_rng(11)
    xy = rng.uniform(-8, 90, (8, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 30, (8, 2))], axis=1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("RoiAlign", ["feat", "rois", "idx"], ["y"], output_height=3, output_width=3,
                          sampling_ratio=2, spatial_scale=0.25)], "g",
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [3, 4, 20, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(boxes, "rois"),
                     numpy_helper.from_array(np.array([0, 1, 2, 2, 1, 0, 2, 2], np.int64), "idx")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    res = rewrite(model, RTX)
    (e,) = res.report.rewrites
    assert (e.rule, e.proof.passed) == ("roialign-portable", True), e.proof
    feeds = {"feat": rng.standard_normal((3, 4, 20, 24)).astype(np.float32)}
    ref, got = run_model(model, feeds)["y"], run_model(res.model, feeds)["y"]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * max(1.0, float(np.abs(ref).max())))


def test_only_a_target_that_needs_it_gets_it():
    assert rewrite(roi_model()).report.rewrites == ()  # no target named: TensorRT 10/11 import RoiAlign
    assert rewrite(roi_model(), RewriteSettings(target="10.16")).report.rewrites == ()
    assert len(rewrite(roi_model(), RTX).report.rewrites) == 1


def with_attrs(model: onnx.ModelProto, **attrs: object) -> onnx.ModelProto:
    """The RoiAlign of ``model`` with these attributes set (mode, sampling_ratio, ...)."""
    node = model.graph.node[-1]
    for name, value in attrs.items():
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute(name, value)])
    return model


def _proven_and_equal(model: onnx.ModelProto, n: int, computed: bool) -> None:
    res = rewrite(model, RTX)
    (e,) = res.report.rewrites
    assert (e.rule, e.proof.method, e.proof.passed) == ("roialign-portable", "onnxruntime", True), e
    ops = {o.op_type for o in res.model.graph.node}
    assert "RoiAlign" not in ops and "Gather" in ops
    feeds = _feeds(n, not computed)
    ref, got = run_model(model, feeds)["y"], run_model(res.model, feeds)["y"]
    assert ref.shape == got.shape == (9, 8, 7, 5) and np.count_nonzero(ref) > ref.size // 4
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("opset, ctm, n, sr", [(10, None, 2, 2), (16, None, 1, 2), (16, "output_half_pixel", 2, 3),
                                               (18, "half_pixel", 1, 1)])
def test_max_mode_is_the_largest_weighted_corner_as_onnxruntime_computes_it(opset, ctm, n, sr):
    computed = n == 1 and opset >= 15
    model = with_attrs(roi_model(max(opset, 16), ctm, n, computed_index=computed), mode="max", sampling_ratio=sr)
    model.opset_import[0].version = opset  # RoiAlign-10: no coordinate_transformation_mode (output_half_pixel)
    _proven_and_equal(model, n, computed)


@pytest.mark.parametrize("opset, ctm, n, mode", [(10, None, 2, "avg"), (16, None, 1, "avg"), (16, None, 2, "max"),
                                                 (18, "output_half_pixel", 2, "max"), (13, None, 1, "max")])
def test_adaptive_sampling_is_bounded_by_the_feature_map(opset, ctm, n, mode):
    """sampling_ratio=0: boxes up to 10x the map's bins, so bins hold several samples, some off the map."""
    computed = n == 1 and opset >= 15
    model = with_attrs(roi_model(max(opset, 16), ctm, n, computed_index=computed), mode=mode, sampling_ratio=0)
    model.opset_import[0].version = opset
    _proven_and_equal(model, n, computed)


def _declined(model: onnx.ModelProto, why: str) -> None:
    """Left as it is, with the reason in the report (``check`` shows the same refusal where its
    table marks RoiAlign refused: rules' ``refusal`` serves both)."""
    res = rewrite(model, RTX)
    assert res.report.rewrites == ()
    assert any("roialign-portable cannot rewrite it" in note and why in note for note in res.report.notes), \
        res.report.notes
    assert "RoiAlign" in {n.op_type for n in res.model.graph.node}


def test_adaptive_sampling_on_a_dynamic_map_is_declined_with_the_reason():
    model = with_attrs(roi_model(), sampling_ratio=0)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 8, "H", "W"]))
    _declined(model, "not static here")


def test_adaptive_sampling_on_a_large_map_is_declined_with_the_cost():
    model = with_attrs(roi_model(), sampling_ratio=0)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 256, 200, 272]))
    _declined(model, "corner values per box")


class _NoHalfPixel(RoiAlignRule):
    def match(self, node, ctx):
        m = super().match(node, ctx)
        return None if m is None else dataclasses.replace(m, half_pixel=not m.half_pixel)


class _AverageForMax(RoiAlignRule):
    def match(self, node, ctx):
        m = super().match(node, ctx)
        return None if m is None else dataclasses.replace(m, max_mode=False)


def test_the_proof_catches_a_half_pixel_mistake():
    with pytest.raises(AccuracyError, match="roialign-portable"):
        rewrite(roi_model(), RTX, rules=(_NoHalfPixel(),))


@pytest.mark.parametrize("sr", [2, 0])
def test_the_proof_catches_a_max_mode_mistake(sr):
    with pytest.raises(AccuracyError, match="roialign-portable"):
        rewrite(with_attrs(roi_model(), mode="max", sampling_ratio=sr), RTX, rules=(_AverageForMax(),))


@pytest.mark.skipif(not HAVE_RTX, reason="tensorrt_rtx is not installed")
def test_rtx_refuses_roi_align_and_takes_the_rewrite(tmp_path):
    from trtconv.trt.realparse import RTX_MODULE, import_tensorrt, parse_and_build

    trt = import_tensorrt(RTX_MODULE)
    model = roi_model()
    for name, m in (("orig", model), ("rewritten", rewrite(model, RTX).model)):
        save_model(m, tmp_path / f"{name}.onnx")
    shapes = {"rois": (8, 4)}
    orig = parse_and_build(tmp_path / "orig.onnx", trt, build=False, shapes=shapes)
    assert not orig.parsed and "ROIAlign" in orig.parser_errors[0].desc
    assert parse_and_build(tmp_path / "rewritten.onnx", trt, shapes=shapes).built


def torchvision_roi_model() -> onnx.ModelProto:
    """RoiAlign as torchvision's exporter writes MultiScaleRoIAlign's (opset 16+ symbolic of
    ``roi_align``, ``aligned=True``, ``sampling_ratio=2``): boxes ``[K, 5]`` split into the batch
    index column (float, cast to int64) and the corners."""
    i64 = TensorProto.INT64

    def c(name, v):
        return numpy_helper.from_array(np.array(v, np.int64), name)

    nodes = [helper.make_node("Slice", ["boxes", "s0", "s1", "ax1"], ["idx_f"]),
             helper.make_node("Squeeze", ["idx_f", "ax1"], ["idx_sq"]),
             helper.make_node("Cast", ["idx_sq"], ["idx"], to=i64),
             helper.make_node("Slice", ["boxes", "s1", "s5", "ax1"], ["rois"]),
             helper.make_node("RoiAlign", ["feat", "rois", "idx"], ["y"], name="roi", output_height=7, output_width=7,
                              sampling_ratio=2, spatial_scale=0.25, coordinate_transformation_mode="half_pixel")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 16, 20, 24]),
                                       helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["K", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[c("s0", [0]), c("s1", [1]), c("s5", [5]), c("ax1", [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_torchvision_multiscale_roi_align_form_is_covered():
    model = torchvision_roi_model()
    res = rewrite(model, RTX)
    (e,) = res.report.rewrites
    assert e.rule == "roialign-portable" and e.proof.passed and "2x2 samples" in e.target
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 90, (12, 2))  # torchvision clips boxes to the 96x80 image
    boxes = np.concatenate([np.zeros((12, 1)), xy, np.minimum(xy + rng.uniform(1, 60, (12, 2)), [96, 80])], 1)
    feeds = {"feat": rng.standard_normal((1, 16, 20, 24)).astype(np.float32), "boxes": boxes.astype(np.float32)}
    ref, got = run_model(model, feeds)["y"], run_model(res.model, feeds)["y"]
    assert ref.shape == got.shape == (12, 16, 7, 7)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * float(np.abs(ref).max()))
