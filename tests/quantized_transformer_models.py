"""Small float graphs built in code for what ONNX Runtime's quantizers make of transformer and
weight-only models: QAttention, QEmbedLayerNormalization, quantized embedding Gathers,
QLinearSoftmax, MatMulNBits (the originals of tests/rewrites/test_quantized_transformer.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
MS = "com.microsoft"
SEQ, HIDDEN, HEADS, VOCAB = 6, 16, 2, 40


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 1.0,
          offset: float = 0.0) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale + offset).astype(np.float32), name)


def bert_block_model(path: Path) -> Path:
    """com.microsoft EmbedLayerNormalization -> Attention (with its mask_index), as ONNX Runtime's
    transformer optimizer fuses a BERT: what quantize_dynamic makes QEmbedLayerNormalization and
    DynamicQuantizeLinear + QAttention of. ids, mask int32 [1, SEQ] -> [1, SEQ, HIDDEN]."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "gamma", "beta", "mask"],
                              ["emb", "mask_index"], domain=MS, epsilon=1e-12),
             helper.make_node("Attention", ["emb", "qkv_w", "qkv_b", "mask_index"], ["y"], domain=MS,
                              num_heads=HEADS)]
    inits = [_init(rng, "word", (VOCAB, HIDDEN), 0.5), _init(rng, "pos", (SEQ + 2, HIDDEN), 0.5),
             _init(rng, "gamma", (HIDDEN,), 0.1, 1.0), _init(rng, "beta", (HIDDEN,), 0.1),
             _init(rng, "qkv_w", (HIDDEN, 3 * HIDDEN), 0.3), _init(rng, "qkv_b", (3 * HIDDEN,), 0.1)]
    g = helper.make_graph(nodes, "bert_block",
                          [helper.make_tensor_value_info("ids", I32, [1, SEQ]),
                           helper.make_tensor_value_info("mask", I32, [1, SEQ])],
                          [helper.make_tensor_value_info("y", F, [1, SEQ, HIDDEN])], inits,
                          value_info=[helper.make_tensor_value_info("emb", F, [1, SEQ, HIDDEN]),
                                      helper.make_tensor_value_info("mask_index", I32, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]),
              str(path))
    return path


def embedding_model(path: Path) -> Path:
    """Gather from an embedding table -> Add (a position bias) -> MatMul: quantize_dynamic makes the
    table uint8 and puts a DequantizeLinear after the Gather. ids int64 [2, 5] -> [2, 5, 4]."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Add", ["e", "pos"], ["p"]), helper.make_node("MatMul", ["p", "w"], ["y"])]
    g = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("ids", I64, [2, 5])],
                          [helper.make_tensor_value_info("y", F, [2, 5, 4])],
                          [_init(rng, "table", (50, 8)), _init(rng, "pos", (5, 8), 0.1), _init(rng, "w", (8, 4), 0.3)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def scores_model(path: Path) -> Path:
    """MatMul -> Softmax -> MatMul (attention scores): quantize_static's QOperator format makes
    QLinearMatMul -> com.microsoft::QLinearSoftmax -> QLinearMatMul of it. x [1, 4, 8] -> [1, 4, 8]."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "w2"], ["y"])]
    g = helper.make_graph(nodes, "scores", [helper.make_tensor_value_info("x", F, [1, 4, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8])],
                          [_init(rng, "w1", (8, 8)), _init(rng, "w2", (8, 8))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def linear_model(path: Path, opset: int = 17) -> Path:
    """x [2, 64] -> MatMul [64, 32] -> Add: MatMulNBitsQuantizer makes com.microsoft::MatMulNBits of the MatMul."""
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", F, [2, 64])],
                          [helper.make_tensor_value_info("y", F, [2, 32])],
                          [_init(rng, "w", (64, 32), 0.2), _init(rng, "b", (32,), 0.1)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def nbits_quantized(float_model: Path, out: Path, block: int = 32, symmetric: bool = True) -> Path:
    """ONNX Runtime's MatMulNBitsQuantizer (4 bits, QOperator form: MatMulNBits)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(str(float_model)), bits=4, block_size=block, is_symmetric=symmetric)
    q.process()
    q.model.save_model_to_file(str(out), use_external_data_format=False)
    return out


def qlinear_add_chain() -> onnx.ModelProto:
    """x [1, 4, 8] -> QuantizeLinear -> QLinearAdd(+ constant [1, 4, 8]) -> QLinearAdd(+ another) ->
    DequantizeLinear, built directly: the second QLinearAdd's variable operand has no inferred shape
    (ONNX knows nothing of com.microsoft ops), its constant one does (BERT's folded position
    embeddings, as quantize_static's QOperator format leaves them)."""
    rng = np.random.default_rng(9)

    def q8(name: str) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.integers(-100, 100, (1, 4, 8)).astype(np.int8), name)

    scalars = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
               (("s_x", 0.02), ("s_c", 0.01), ("s_a", 0.03), ("s_d", 0.015), ("s_b", 0.04))]
    zeros = [numpy_helper.from_array(np.array(0, np.int8), n) for n in ("z",)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"]),
             helper.make_node("QLinearAdd", ["xq", "s_x", "z", "c", "s_c", "z", "s_a", "z"], ["a"], domain=MS),
             helper.make_node("QLinearAdd", ["a", "s_a", "z", "d", "s_d", "z", "s_b", "z"], ["b"], domain=MS),
             helper.make_node("DequantizeLinear", ["b", "s_b", "z"], ["y"])]
    g = helper.make_graph(nodes, "qadd", [helper.make_tensor_value_info("x", F, [1, 4, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8])], [q8("c"), q8("d"), *scalars, *zeros])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def qlinear_mul_by_quantized_constant() -> onnx.ModelProto:
    """x [1, 4, 8] -> QuantizeLinear -> QLinearMul by a QuantizeLinear of a scalar Constant node (int8,
    zero point 5: what quantize_static's QOperator format makes of BERT's 1/sqrt(d) and GELU's constants)."""
    t = numpy_helper.from_array(np.array(0.25, np.float32), "c_value")
    scalars = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
               (("s_x", 0.02), ("s_c", 0.003), ("s_y", 0.01))]
    zeros = [numpy_helper.from_array(np.array(v, np.int8), n) for n, v in (("z", 0), ("z_c", 5))]
    nodes = [helper.make_node("Constant", [], ["c"], value=t),
             helper.make_node("QuantizeLinear", ["c", "s_c", "z_c"], ["cq"]),
             helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"]),
             helper.make_node("QLinearMul", ["xq", "s_x", "z", "cq", "s_c", "z_c", "s_y", "z"], ["m"], domain=MS),
             helper.make_node("DequantizeLinear", ["m", "s_y", "z"], ["y"])]
    g = helper.make_graph(nodes, "qmul", [helper.make_tensor_value_info("x", F, [1, 4, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8])], [*scalars, *zeros])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def reshaped_qlinear_output() -> onnx.ModelProto:
    """QLinearAdd -> Reshape -> (DequantizeLinear -> y1, and QLinearMul -> DequantizeLinear -> y2): the
    DequantizeLinear after the Reshape comes before the QLinearMul that reads the Reshape too (a
    QOperator ViT's MLP), so it sees the Reshape's output before anything marked it float."""
    rng = np.random.default_rng(10)
    c = numpy_helper.from_array(rng.integers(-100, 100, (1, 4, 8)).astype(np.int8), "c")
    d = numpy_helper.from_array(rng.integers(-100, 100, (2, 16)).astype(np.int8), "d")
    shape = numpy_helper.from_array(np.array([2, 16], np.int64), "shape")
    scalars = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
               (("s_x", 0.02), ("s_c", 0.01), ("s_a", 0.03), ("s_d", 0.01), ("s_m", 0.02))]
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"]),
             helper.make_node("QLinearAdd", ["xq", "s_x", "z", "c", "s_c", "z", "s_a", "z"], ["a"], domain=MS),
             helper.make_node("Reshape", ["a", "shape"], ["r"]),
             helper.make_node("DequantizeLinear", ["r", "s_a", "z"], ["y1"]),
             helper.make_node("QLinearMul", ["r", "s_a", "z", "d", "s_d", "z", "s_m", "z"], ["m"], domain=MS),
             helper.make_node("DequantizeLinear", ["m", "s_m", "z"], ["y2"])]
    g = helper.make_graph(nodes, "reshaped", [helper.make_tensor_value_info("x", F, [1, 4, 8])],
                          [helper.make_tensor_value_info("y1", F, [2, 16]), helper.make_tensor_value_info("y2", F, [2, 16])],
                          [c, d, shape, *scalars, z])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def qlinear_scores() -> onnx.ModelProto:
    """QLinearMatMul of two activations (attention's Q.K^T, as a QOperator Whisper encoder has it):
    x [1, 2, 4, 8] quantized, times the Transpose of a QLinearAdd's output, whose shape ONNX cannot
    infer (a com.microsoft op writes it)."""
    rng = np.random.default_rng(11)
    c = numpy_helper.from_array(rng.integers(-100, 100, (1, 2, 4, 8)).astype(np.int8), "c")
    scalars = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
               (("s_x", 0.02), ("s_c", 0.01), ("s_a", 0.03), ("s_m", 0.05))]
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"]),
             helper.make_node("QLinearAdd", ["xq", "s_x", "z", "c", "s_c", "z", "s_a", "z"], ["a"], domain=MS),
             helper.make_node("Transpose", ["a"], ["at"], perm=[0, 1, 3, 2]),
             helper.make_node("QLinearMatMul", ["xq", "s_x", "z", "at", "s_a", "z", "s_m", "z"], ["m"]),
             helper.make_node("DequantizeLinear", ["m", "s_m", "z"], ["y"])]
    g = helper.make_graph(nodes, "scores", [helper.make_tensor_value_info("x", F, [1, 2, 4, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 2, 4, 4])], [c, *scalars, z])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
