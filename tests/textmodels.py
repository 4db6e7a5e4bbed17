"""Small transformer-encoder graphs built in code, in the form BERT exports take.

Three int64 inputs of shape (batch, seq): ``input_ids`` into a word embedding,
``token_type_ids`` into a **2-row** segment embedding (values 2 and 3 are out of range there,
as in every BERT), ``attention_mask`` turned into an additive mask; position ids computed in
the graph (Shape → Range → Gather); embeddings summed, LayerNormalization, one self-attention
head (scaled by a ``Sqrt`` of a constant), a projection, GELU
(``Erf``, with ``sqrt(2)`` computed from a constant). Constant folding evaluates those square
roots ahead of time: in the FP16 form that moves where ONNX Runtime rounds. Seeded weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, SEGMENTS, POSITIONS, HIDDEN = 50, 2, 64, 16
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    return {
        "word_emb": w(VOCAB, HIDDEN), "type_emb": w(SEGMENTS, HIDDEN), "pos_emb": w(POSITIONS, HIDDEN),
        "ln_scale": np.ones(HIDDEN, np.float32), "ln_bias": np.zeros(HIDDEN, np.float32),
        "wq": w(HIDDEN, HIDDEN), "wk": w(HIDDEN, HIDDEN), "wv": w(HIDDEN, HIDDEN), "wo": w(HIDDEN, HIDDEN),
        "head_dim": np.array(12.0, np.float32), "one": np.array(1.0, np.float32),
        "two": np.array(2.0, np.float32), "half": np.array(0.5, np.float32),
        "neg": np.array(-10000.0, np.float32),
    }


def _ints() -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
            (("zero", 0), ("step", 1), ("axis1", [1]), ("seq_index", 1))]


def bert_like(path: Path, *, fp16: bool = False, batch: str | int = "batch", seq: str | int = "seq") -> Path:
    """The encoder described above. ``fp16``: its float weights are FP16 initializers, every
    computation runs in FP16 between Casts, inputs and output stay FP32/int64 (a "half" export)."""
    rng = np.random.default_rng(0)
    weights = _weights(rng)
    dt = np.float16 if fp16 else np.float32
    inits = [numpy_helper.from_array(v.astype(dt), k) for k, v in weights.items()] + _ints()
    nodes = [
        helper.make_node("Gather", ["word_emb", "input_ids"], ["words"], name="word_embeddings"),
        helper.make_node("Gather", ["type_emb", "token_type_ids"], ["types"], name="token_type_embeddings"),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="ids_shape"),
        helper.make_node("Gather", ["ids_shape", "seq_index"], ["seq_len"], name="seq_len"),
        helper.make_node("Range", ["zero", "seq_len", "step"], ["positions"], name="positions"),
        helper.make_node("Gather", ["pos_emb", "positions"], ["pos"], name="position_embeddings"),
        helper.make_node("Add", ["words", "types"], ["e1"], name="add_types"),
        helper.make_node("Add", ["e1", "pos"], ["e2"], name="add_positions"),
        helper.make_node("LayerNormalization", ["e2", "ln_scale", "ln_bias"], ["h"], name="ln", axis=-1,
                         epsilon=1e-5),
        helper.make_node("MatMul", ["h", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["h", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["h", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="qk"),
        helper.make_node("Sqrt", ["head_dim"], ["sqrt_dim"], name="sqrt_dim"),  # constant: folded by rewrite
        helper.make_node("Div", ["qk", "sqrt_dim"], ["scores0"], name="scaled"),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], name="mask_cast",
                         to=TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mask_f"], ["inv_mask"], name="inv_mask"),
        helper.make_node("Mul", ["inv_mask", "neg"], ["add_mask0"], name="mask_bias"),
        helper.make_node("Unsqueeze", ["add_mask0", "axis1"], ["add_mask"], name="mask_unsqueeze"),
        helper.make_node("Add", ["scores0", "add_mask"], ["scores"], name="masked"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="context"),
        helper.make_node("MatMul", ["ctx", "wo"], ["proj"], name="out_proj"),
        # GELU as BERT exports it: x * 0.5 * (1 + erf(x / sqrt(2))), sqrt(2) computed from a constant
        helper.make_node("Sqrt", ["two"], ["sqrt2"], name="sqrt2"),
        helper.make_node("Div", ["proj", "sqrt2"], ["g0"], name="gelu_div"),
        helper.make_node("Erf", ["g0"], ["g1"], name="gelu_erf"),
        helper.make_node("Add", ["g1", "one"], ["g2"], name="gelu_add"),
        helper.make_node("Mul", ["proj", "g2"], ["g3"], name="gelu_mul"),
        helper.make_node("Mul", ["g3", "half"], ["out16" if fp16 else "last_hidden_state"], name="gelu_half"),
    ]
    if fp16:
        nodes.append(helper.make_node("Cast", ["out16"], ["last_hidden_state"], name="out_cast",
                                      to=TensorProto.FLOAT))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq]) for n in INPUTS]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, HIDDEN])
    graph = helper.make_graph(nodes, "bert_like", inputs, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def shifted_index_model(path: Path) -> Path:
    """An int64 input ``ids`` (1, 8) that indexes a 4-row table only after ``+ 1``: values 0..2
    are valid, 3 is not. trtconv cannot trace the bound through the Add, so its random values
    (0..3) fail in ONNX Runtime while 0 and 1 run: a failure of the values, not the shapes."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "table")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [helper.make_node("Add", ["ids", "one"], ["shifted"], name="shift"),
             helper.make_node("Gather", ["table", "shifted"], ["rows"], name="lookup"),
             helper.make_node("Relu", ["rows"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "shifted", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])],
                              initializer=[table, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path
