"""Small graphs of ONNX Runtime's fused transformer ops (com.microsoft), built in code with
seeded weights: one node per model for the rule tests, and a tiny BERT-like encoder made of
them for the end-to-end build."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F = TensorProto.FLOAT
I32 = TensorProto.INT32
I64 = TensorProto.INT64


@dataclass(frozen=True)
class In:
    """One node input: a graph input (``value`` None) of ``dtype``/``shape``, or a constant."""

    name: str
    shape: Sequence[Any] = ()
    dtype: int = F
    value: np.ndarray | None = None


def const(name: str, value: Any) -> In:
    arr = np.asarray(value)
    return In(name, arr.shape, helper.np_dtype_to_tensor_dtype(arr.dtype), arr)


def weights(shape: Sequence[int], seed: int, scale: float = 0.5) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(tuple(shape)) * scale).astype(np.float32)


@dataclass(frozen=True)
class Case:
    op: str
    inputs: Sequence[In | None]  # None: an optional input left out
    outputs: Sequence[str] = ("y",)  # "" leaves an optional output out
    attrs: Mapping[str, Any] = field(default_factory=dict)
    domain: str = MS
    opset: int = 17

    def model(self) -> onnx.ModelProto:
        graph_inputs, inits = [], []
        for i in self.inputs:
            if i is None:
                continue
            if i.value is not None:
                inits.append(numpy_helper.from_array(i.value, i.name))
            else:
                graph_inputs.append(helper.make_tensor_value_info(i.name, i.dtype, list(i.shape)))
        node = helper.make_node(self.op, [i.name if i is not None else "" for i in self.inputs], list(self.outputs),
                                name=f"{self.op.lower()}0", domain=self.domain, **dict(self.attrs))
        outs = [helper.make_empty_tensor_value_info(o) for o in self.outputs if o]
        g = helper.make_graph([node], self.op, graph_inputs, outs, initializer=inits)
        opsets = [helper.make_opsetid("", self.opset)] + ([helper.make_opsetid(MS, 1)] if self.domain == MS else [])
        return helper.make_model(g, opset_imports=opsets, ir_version=9)


def feeds(model: onnx.ModelProto, seed: int = 7, ints: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Random float inputs (and the given integer ones) for ``model``'s graph inputs."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if ints and vi.name in ints:
            out[vi.name] = ints[vi.name]
            continue
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def tiny_bert(opset: int = 17, batch: int | str = 1, seq: int | str = 8, hidden: int = 16, heads: int = 2,
              layers: int = 2, vocab: int = 30) -> onnx.ModelProto:
    """EmbedLayerNormalization -> [Attention -> SkipLayerNormalization -> MatMul -> BiasGelu ->
    MatMul -> SkipLayerNormalization] x layers -> FastGelu, ONNX Runtime's BERT fusions."""
    s = 100
    inits = [
        numpy_helper.from_array(weights((vocab, hidden), s), "word"),
        numpy_helper.from_array(weights((16, hidden), s + 1), "pos"),
        numpy_helper.from_array(weights((4, hidden), s + 2), "seg"),  # 4 rows: build's pre-flight feeds ids 0..3
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln_g"),
        numpy_helper.from_array(weights((hidden,), s + 3, 0.1), "ln_b"),
    ]
    nodes = [helper.make_node("EmbedLayerNormalization",
                              ["input_ids", "segment_ids", "word", "pos", "seg", "ln_g", "ln_b", "mask"],
                              ["emb", "mask_index"], name="embed", domain=MS, epsilon=1e-12)]
    x = "emb"
    for i in range(layers):
        p = f"l{i}_"
        inits += [
            numpy_helper.from_array(weights((hidden, 3 * hidden), s + 10 * i + 4, 0.3), p + "qkv_w"),
            numpy_helper.from_array(weights((3 * hidden,), s + 10 * i + 5, 0.1), p + "qkv_b"),
            numpy_helper.from_array(weights((hidden, hidden), s + 10 * i + 6, 0.3), p + "o_w"),
            numpy_helper.from_array(weights((hidden, 4 * hidden), s + 10 * i + 7, 0.3), p + "fc1_w"),
            numpy_helper.from_array(weights((4 * hidden,), s + 10 * i + 8, 0.1), p + "fc1_b"),
            numpy_helper.from_array(weights((4 * hidden, hidden), s + 10 * i + 9, 0.2), p + "fc2_w"),
            numpy_helper.from_array(weights((hidden,), s + 10 * i + 1, 0.1), p + "bias"),
        ]
        nodes += [
            helper.make_node("Attention", [x, p + "qkv_w", p + "qkv_b", "mask_index"], [p + "att"], name=p + "att",
                             domain=MS, num_heads=heads),
            helper.make_node("MatMul", [p + "att", p + "o_w"], [p + "proj"], name=p + "proj"),
            helper.make_node("SkipLayerNormalization", [p + "proj", x, "ln_g", "ln_b", p + "bias"], [p + "ln1"],
                             name=p + "ln1", domain=MS, epsilon=1e-12),
            helper.make_node("MatMul", [p + "ln1", p + "fc1_w"], [p + "fc1"], name=p + "fc1"),
            helper.make_node("BiasGelu", [p + "fc1", p + "fc1_b"], [p + "act"], name=p + "act", domain=MS),
            helper.make_node("MatMul", [p + "act", p + "fc2_w"], [p + "fc2"], name=p + "fc2"),
            helper.make_node("SkipLayerNormalization", [p + "fc2", p + "ln1", "ln_g", "ln_b"], [p + "ln2"],
                             name=p + "ln2", domain=MS, epsilon=1e-12),
        ]
        x = p + "ln2"
    nodes.append(helper.make_node("FastGelu", [x], ["y"], name="head_act", domain=MS))
    ids = [helper.make_tensor_value_info(n, I32, [batch, seq]) for n in ("input_ids", "segment_ids", "mask")]
    g = helper.make_graph(nodes, "tiny_bert", ids, [helper.make_tensor_value_info("y", F, [batch, seq, hidden])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                             ir_version=9)


def bert_feeds(batch: int = 1, seq: int = 8, vocab: int = 30, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int32)
    mask[:, seq - 2:] = 0  # right padding
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int32),
            "segment_ids": rng.integers(0, 2, (batch, seq)).astype(np.int32), "mask": mask}
