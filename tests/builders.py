"""Inputs several test packages share: small DCNv2 graphs built in code, classifier calibration data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from realdata import text_line_image

from trtconv.rewrites.dcn.deform_math import DcnParams


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


def dcn_node_model(dialect: str, spec: tuple, *, batch: int | str = 1, spatial: bool = True, dtype=np.float32,
           opset: int | None = None, seed: int = 3) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One DCN node of ``dialect`` ("centernet", "mmcv", "onnx") then Relu; the weight and bias are
    initializers, as exporters write them. ``spec``: (C, Cout, k, H, W, stride, pads [t, l, b, r],
    dilation, group, deformable_group, mask, bias). Returns the model and its initializers."""
    c, co, k, h, w, stride, pads, dil, group, dg, with_mask, with_bias = spec
    p = DcnParams(stride, pads, dil, group, dg)
    oh, ow = p.out_hw(h, w, k, k)
    rng = np.random.default_rng(seed)
    T = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array((rng.standard_normal((co, c // group, k, k)) * 0.3).astype(dtype), "weight")]
    if with_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(co).astype(dtype), "bias"))
    hw = [h, w] if spatial else ["H", "W"]
    ohw = [oh, ow] if spatial else ["OH", "OW"]
    ins = [helper.make_tensor_value_info("x", T, [batch, c, *hw]),
           helper.make_tensor_value_info("offset", T, [batch, 2 * dg * k * k, *ohw])]
    if with_mask:
        ins.append(helper.make_tensor_value_info("mask", T, [batch, dg * k * k, *ohw]))
    opsets = [helper.make_opsetid("", opset or (19 if dialect == "onnx" else 11))]
    bias = "bias" if with_bias else ""
    ph, pw = pads[0], pads[1]
    if dialect == "centernet":
        node = helper.make_node("DCNv2", ["x", "offset", "mask", "weight", bias], ["dcn"], name="dcn0",
                                stride=list(stride), padding=[ph, pw], dilation=list(dil), deformable_groups=dg)
    elif dialect == "mmcv":
        node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "weight"] + ([bias] if bias else []),
                                ["dcn"], name="dcn0", domain="mmcv", stride=list(stride), padding=[ph, pw],
                                dilation=list(dil), groups=group, deform_groups=dg)
        opsets.append(helper.make_opsetid("mmcv", 1))
    else:
        names = ["x", "weight", "offset", bias, "mask" if with_mask else ""]
        while names[-1] == "":
            names.pop()
        node = helper.make_node("DeformConv", names, ["dcn"], name="dcn0", strides=list(stride), pads=list(pads),
                                dilations=list(dil), group=group, offset_group=dg, kernel_shape=[k, k])
    g = helper.make_graph([node, helper.make_node("Relu", ["dcn"], ["y"], name="relu")], "g", ins,
                          [helper.make_tensor_value_info("y", T, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=opsets, ir_version=8)
    return model, {i.name: numpy_helper.to_array(i) for i in inits}


def cls_calibration(folder: Path, n: int = 10) -> Path:
    """Rendered text lines preprocessed as PaddleOCR's classifier expects (48x192, [-1, 1])."""
    folder.mkdir()
    for i in range(n):
        img = text_line_image(seed=i).convert("RGB").resize((192, 48))
        x = (np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5
        np.save(folder / f"{i:03d}.npy", x.transpose(2, 0, 1)[None])
    return folder


def two_inputs_one_dim_name(folder: Path) -> Path:
    """Two inputs naming a dim alike: 4 vs 8 is a contradiction only TensorRT's builder sees (exit 6)."""
    g = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, "n"]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None])])
    path = folder / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def bool_equal_model(path: Path) -> Path:
    """Two boolean masks compared with Equal: `check --trt rtx` refuses it (its table gives Equal no BOOL
    input), TensorRT-RTX 1.7.1's own parser and builder take it (measured): a prediction the real parser
    overrules."""
    g = helper.make_graph([helper.make_node("Equal", ["a", "b"], ["y"], name="masks_equal")], "masks",
                          [helper.make_tensor_value_info("a", TensorProto.BOOL, [2, 3]),
                           helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def ms_gelu_model(path: Path, dtype: int = TensorProto.FLOAT) -> Path:
    """ONNX Runtime's com.microsoft::Gelu alone: trtconv rewrites it (ms-gelu), while TensorRT's parser also
    takes it as it is (as ONNX's Gelu, the same function): a rewrite that may step aside."""
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="gelu0", domain="com.microsoft")], "gelu",
                          [helper.make_tensor_value_info("x", dtype, [1, 4, 8])],
                          [helper.make_tensor_value_info("y", dtype, [1, 4, 8])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets, ir_version=9), path)
    return path


def int32_relu_model(path: Path) -> Path:
    """Relu on an INT32 input (valid ONNX since opset 14): `check --trt rtx` calls it supported, TensorRT-RTX
    1.7.1's parser rejects it ("Found unsupported input type of INT32", measured): a miss of the prediction."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="int_relu")], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.INT32, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def mask_model(path: Path) -> Path:
    """A mask whose sum is the length x is cut to: TensorRT makes ``mask`` a shape tensor."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), n) for n in ("ax0", "zero")]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    nodes = [helper.make_node("ReduceSum", ["mask"], ["n"], keepdims=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["end"]),
             helper.make_node("Slice", ["x", "zero", "end", "ax1"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
                                          helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "L"])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def two_conv_net() -> onnx.ModelProto:
    """Conv -> Relu -> Conv on [1, 4, 12, 12], seeded weights: the INT8 judging and early-stop tests' model."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 4, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def audio_conv_model(path: Path, kernel: int) -> Path:
    """A 1-D convolution over [1, 1, n] (an audio front end's window of ``kernel`` samples): no output for an n
    below the window."""
    w = numpy_helper.from_array(np.ones((1, 1, kernel), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="window")], "audio",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "m"])], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path
