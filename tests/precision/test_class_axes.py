"""Top-1 agreement is taken along the axis a Softmax's classes lie on, not always the last one.

MTCNN's PNet (facenet-pytorch) ends in a softmax over axis 1 of an NCHW map: face or not at each
location. INT8's report measured its "top-1 agreement" as an argmax along the width and printed 0.5032
for an output whose classes agreed at 100 % of locations."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtconv.precision.int8.accuracy import accuracy_details
from trtconv.reference import class_axes

F = TensorProto.FLOAT


def _face_map(weight: np.ndarray, opset: int = 17) -> onnx.ModelProto:
    """x [1, 4, 6, 8] -> 1x1 Conv to 2 channels -> Softmax over axis 1: a per-location two-class map."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["prob"], axis=1)]
    g = helper.make_graph(nodes, "pnet_like", [helper.make_tensor_value_info("x", F, [1, 4, 6, 8])],
                          [helper.make_tensor_value_info("prob", F, [1, 2, 6, 8])],
                          [numpy_helper.from_array(weight.astype(np.float32), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def test_top1_is_the_agreement_of_each_locations_class():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 4, 1, 1))
    reference, candidate = _face_map(w), _face_map(w + 0.4 * rng.standard_normal(w.shape))
    samples = [{"x": rng.standard_normal((1, 4, 6, 8)).astype(np.float32)} for _ in range(6)]
    acc = accuracy_details(reference, candidate, samples)
    (stats,) = acc.stats

    def probs(model, x):
        logits = np.einsum("oc,bchw->bohw", onnx.numpy_helper.to_array(model.graph.initializer[0])[:, :, 0, 0], x)
        return logits  # the argmax of the softmax is the argmax of its logits

    per_location = np.mean([(probs(reference, s["x"]).argmax(1) == probs(candidate, s["x"]).argmax(1)).mean()
                            for s in samples])
    along_width = np.mean([(probs(reference, s["x"]).argmax(3) == probs(candidate, s["x"]).argmax(3)).mean()
                           for s in samples])
    assert 0.5 < per_location < 1.0 and abs(along_width - per_location) > 0.05  # the two readings differ here
    assert stats.top1_agreement is not None and abs(stats.top1_agreement - per_location) < 1e-9


def test_which_outputs_are_classes_and_along_which_axis():
    rng = np.random.default_rng(1)
    assert class_axes(_face_map(rng.standard_normal((2, 4, 1, 1)))) == {"prob": 1}
    # before opset 13 a softmax's classes are every axis from `axis` on, flattened: no single axis to take
    assert class_axes(_face_map(rng.standard_normal((2, 4, 1, 1)), opset=11)) == {}

    def chain(*nodes, out_shape=(1, 2, 6, 8)) -> onnx.ModelProto:
        g = helper.make_graph(list(nodes), "g", [helper.make_tensor_value_info("x", F, [1, 2, 6, 8])],
                              [helper.make_tensor_value_info("y", F, list(out_shape))],
                              [numpy_helper.from_array(np.array([1, 2, 48], np.int64), "shape")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

    last = helper.make_node("Softmax", ["x"], ["p"], axis=-1)
    assert class_axes(chain(last, helper.make_node("Identity", ["p"], ["y"]))) == {"y": -1}
    moved = helper.make_node("Transpose", ["p"], ["y"], perm=[0, 3, 2, 1])  # the classes' axis moves: not told
    assert class_axes(chain(last, moved, out_shape=(1, 8, 6, 2))) == {}
    over_channels = helper.make_node("Softmax", ["x"], ["p"], axis=1)
    flat = helper.make_node("Reshape", ["p", "shape"], ["y"])  # after a reshape, axis 1's classes are not an axis
    assert class_axes(chain(over_channels, flat, out_shape=(1, 2, 48))) == {}
    scores = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                               [helper.make_tensor_value_info("x", F, [1, 10])],
                               [helper.make_tensor_value_info("y", F, [1, 10])])
    assert class_axes(helper.make_model(scores, opset_imports=[helper.make_opsetid("", 17)])) == {"y": -1}
