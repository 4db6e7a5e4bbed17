"""Inputs several test packages share: a small DCNv2 graph built in code, classifier calibration data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from realdata import text_line_image


def dcn_model(path: Path) -> Path:
    """conv → offsets/mask conv → CenterNet DCNv2 → ReLU, seeded weights."""
    rng = np.random.default_rng(0)
    c, co, k = 8, 16, 3
    F = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array((rng.standard_normal((3 * k * k, c, 3, 3)) * 0.05).astype(np.float32), "om_w"),
        numpy_helper.from_array(np.zeros(3 * k * k, np.float32), "om_b"),
        numpy_helper.from_array((rng.standard_normal((co, c, k, k)) * 0.2).astype(np.float32), "dcn_w"),
        numpy_helper.from_array(rng.standard_normal(co).astype(np.float32), "dcn_b"),
        numpy_helper.from_array(np.array([0], np.int64), "split_at"),
        numpy_helper.from_array(np.array([2 * k * k], np.int64), "split_mid"),
        numpy_helper.from_array(np.array([3 * k * k], np.int64), "split_end"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "om_w", "om_b"], ["om"], name="offset_mask", pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["om", "split_at", "split_mid", "axis1"], ["offset"], name="offset_slice"),
        helper.make_node("Slice", ["om", "split_mid", "split_end", "axis1"], ["mask_logits"], name="mask_slice"),
        helper.make_node("Sigmoid", ["mask_logits"], ["mask"], name="mask_sigmoid"),
        helper.make_node("DCNv2", ["x", "offset", "mask", "dcn_w", "dcn_b"], ["dcn"], name="dcn0",
                         stride=[1, 1], padding=[1, 1], dilation=[1, 1], deformable_groups=1),
        helper.make_node("Relu", ["dcn"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "dcn", [helper.make_tensor_value_info("x", F, [1, c, 32, 32])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def cls_calibration(folder: Path, n: int = 10) -> Path:
    """Rendered text lines preprocessed as PaddleOCR's classifier expects (48x192, [-1, 1])."""
    folder.mkdir()
    for i in range(n):
        img = text_line_image(seed=i).convert("RGB").resize((192, 48))
        x = (np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5
        np.save(folder / f"{i:03d}.npy", x.transpose(2, 0, 1)[None])
    return folder
