"""Small detector-like graphs built in code whose post-processing is data-dependent (NonZero,
NonMaxSuppression): what ``build --split-tail`` cuts into an engine and an ONNX Runtime tail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=9), path)
    return path


def nms_model(path: Path, *, size: int = 16) -> Path:
    """Conv → boxes [1, N, 4] and scores [1, 1, N] → NonMaxSuppression → Gather of the kept boxes and
    scores; ``all_scores`` (computed before the NMS) is an output too."""
    rng = np.random.default_rng(0)
    n = size * size
    inits = [
        numpy_helper.from_array((rng.standard_normal((5, 3, 3, 3)) * 0.5).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([0], np.int64), "c0"),
        numpy_helper.from_array(np.array([4], np.int64), "c4"),
        numpy_helper.from_array(np.array([5], np.int64), "c5"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        numpy_helper.from_array(np.array([1, 4, n], np.int64), "box_shape"),
        numpy_helper.from_array(np.array([1, 1, n], np.int64), "score_shape"),
        numpy_helper.from_array(np.array([n], np.int64), "flat"),
        numpy_helper.from_array(np.array([n, 4], np.int64), "box_rows"),
        numpy_helper.from_array(np.array([20], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.3], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.4], np.float32), "score_thr"),
        numpy_helper.from_array(np.array(2, np.int64), "col2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["feat"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["feat", "c0", "c4", "ax1"], ["box_raw"], name="box_slice"),
        helper.make_node("Slice", ["feat", "c4", "c5", "ax1"], ["score_raw"], name="score_slice"),
        helper.make_node("Reshape", ["box_raw", "box_shape"], ["box_cn"], name="box_reshape"),
        helper.make_node("Transpose", ["box_cn"], ["boxes"], name="box_transpose", perm=[0, 2, 1]),
        helper.make_node("Sigmoid", ["score_raw"], ["score_sig"], name="score_sigmoid"),
        helper.make_node("Reshape", ["score_sig", "score_shape"], ["scores"], name="score_reshape"),
        helper.make_node("Reshape", ["scores", "flat"], ["all_scores"], name="score_flat"),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["selected"],
                         name="nms"),
        helper.make_node("Gather", ["selected", "col2"], ["keep"], name="keep_index", axis=1),
        helper.make_node("Reshape", ["boxes", "box_rows"], ["box_table"], name="box_table"),
        helper.make_node("Gather", ["box_table", "keep"], ["det_boxes"], name="det_boxes", axis=0),
        helper.make_node("Gather", ["all_scores", "keep"], ["det_scores"], name="det_scores", axis=0),
    ]
    graph = helper.make_graph(
        nodes, "nms", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
        [helper.make_tensor_value_info("det_boxes", F, ["k", 4]),
         helper.make_tensor_value_info("det_scores", F, ["k"]),
         helper.make_tensor_value_info("all_scores", F, [n])], inits)
    return _save(graph, path)


def nonzero_model(path: Path) -> Path:
    """Relu → NonZero → GatherND of the positive values; ``doubled`` (before the NonZero) is an output too."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "r"], ["doubled"], name="double"),
        helper.make_node("NonZero", ["r"], ["idx"], name="nonzero"),
        helper.make_node("Transpose", ["idx"], ["idx_t"], name="idx_transpose", perm=[1, 0]),
        helper.make_node("GatherND", ["doubled", "idx_t"], ["positive"], name="gather_positive"),
    ]
    graph = helper.make_graph(
        nodes, "nonzero", [helper.make_tensor_value_info("x", F, [2, 8])],
        [helper.make_tensor_value_info("positive", F, ["n"]), helper.make_tensor_value_info("doubled", F, [2, 8])])
    return _save(graph, path)


def nonzero_in_branch_model(path: Path) -> Path:
    """A NonZero inside an If's branch: the split cuts the main graph only, so it declines."""
    branch_nodes = [helper.make_node("NonZero", ["r"], ["idx"], name="nonzero_in_then"),
                    helper.make_node("Cast", ["idx"], ["out"], name="cast_then", to=F)]
    then = helper.make_graph(branch_nodes, "then", [], [helper.make_tensor_value_info("out", F, None)])
    other = helper.make_graph([helper.make_node("Cast", ["r"], ["out2"], name="cast_else", to=F)], "else", [],
                              [helper.make_tensor_value_info("out2", F, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("ReduceSum", ["r"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(nodes, "branch", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return _save(graph, path)
