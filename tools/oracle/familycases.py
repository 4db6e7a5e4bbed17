"""One small model per rewrite family of issue 25 (what `check` marks ``rewritable``): the oracle
then measures that a node the parser rejects and a rule rewrites is predicted "not as-is", and that
an op the parser takes as it is (float64, ONNX Runtime's Gelu) is not predicted rejected.

name -> (model, build profile, note), like :func:`tools.oracle.rulecases.RULE_MODELS`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, U8, I8, I32, I64, F64 = (TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32,
                            TensorProto.INT64, TensorProto.DOUBLE)
MS = "com.microsoft"


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)]
    if any(n.domain == MS for n in nodes):
        opsets.append(helper.make_opsetid(MS, 1))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def _vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _w(name: str, shape, seed: int, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(dtype), name)


def _rope() -> list[onnx.TensorProto]:
    angles = np.arange(16)[:, None] * np.linspace(0.1, 1.0, 4)[None]
    return [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
            numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]


def _transformer() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    x = _vi("x", F, [2, 4, 8])
    return {
        "ms_attention": (_model([helper.make_node("Attention", ["x", "w", "b"], ["y"], domain=MS, num_heads=2)], [x],
                                [_vi("y", F, None)], [_w("w", (8, 24), 1), _w("b", (24,), 2)]), {},
                         "com.microsoft::Attention: routed to ONNX's Attention importer, which fails"),
        "ms_rotary_embedding": (
            _model([helper.make_node("RotaryEmbedding", ["x", "p", "cos", "sin"], ["y"], domain=MS)],
                   [_vi("x", F, [2, 2, 4, 8]), _vi("p", I64, [2, 4])], [_vi("y", F, None)], _rope()),
            {}, "com.microsoft::RotaryEmbedding: imported as ONNX RotaryEmbedding (other input order)"),
        "ms_skip_layernorm": (
            _model([helper.make_node("SkipLayerNormalization", ["x", "s", "g", "bt"], ["y"], domain=MS)],
                   [x, _vi("s", F, [2, 4, 8])], [_vi("y", F, None)], [_w("g", (8,), 3), _w("bt", (8,), 4)]),
            {}, "no importer (RTX: no plugin)"),
        "ms_gelu": (_model([helper.make_node("Gelu", ["x"], ["y"], domain=MS)], [x], [_vi("y", F, None)]), {},
                    "imported as ONNX's Gelu: the same function"),
    }


def _quantized() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    w = numpy_helper.from_array(np.random.default_rng(5).integers(0, 255, (4, 3, 3, 3)).astype(np.uint8), "w")
    zp = numpy_helper.from_array(np.array(128, np.uint8), "wzp")
    dyn = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"]),
           helper.make_node("ConvInteger", ["xq", "w", "xzp", "wzp"], ["acc"]),
           helper.make_node("Cast", ["acc"], ["accf"], to=F),
           helper.make_node("Mul", ["accf", "xs"], ["y"])]
    bias = numpy_helper.from_array(np.array([5, -3, 7, 1], np.int32), "bq")
    bscale = numpy_helper.from_array(np.array([0.01] * 4, np.float32), "bs")
    qdq_bias = [helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"]),
                helper.make_node("Add", ["x", "bf"], ["y"])]
    return {
        "ort_dynamic_convinteger": (_model(dyn, [_vi("x", F, [1, 3, 8, 8])], [_vi("y", F, None)], [w, zp], 13), {},
                                    "ONNX Runtime dynamic quantization: no importer for its integer ops"),
        "ort_qdq_int32_bias": (_model(qdq_bias, [_vi("x", F, [2, 4])], [_vi("y", F, None)], [bias, bscale], 13), {},
                               "static QDQ: the int32 bias DequantizeLinear"),
    }


def _dtypes() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    u8 = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Cast", ["t"], ["y"], to=F)]
    return {
        "uint8_nhwc_transpose": (_model(u8, [_vi("x", U8, [1, 8, 8, 3])], [_vi("y", F, None)]), {},
                                 "a uint8 image input into Transpose"),
        "float64_relu": (_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", F64, [2, 4])],
                                [_vi("y", F64, None)]), {}, "float64: the parser narrows it to float32 and accepts"),
    }


def _detection() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    rois = numpy_helper.from_array(np.array([[0, 0, 4, 4], [1, 1, 6, 7]], np.float32), "rois")
    idx = numpy_helper.from_array(np.array([0, 0], np.int64), "idx")
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=2, output_width=2,
                            sampling_ratio=2, spatial_scale=1.0)
    return {"roi_align": (_model([node], [_vi("x", F, [1, 3, 8, 8])], [_vi("y", F, None)], [rois, idx], 16), {},
                          "RoiAlign: a plugin on the parser side (RTX has none)")}


def FAMILY_MODELS() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    return {**_transformer(), **_quantized(), **_dtypes(), **_detection()}
