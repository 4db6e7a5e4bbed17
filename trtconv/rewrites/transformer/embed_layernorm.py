"""``com.microsoft::EmbedLayerNormalization`` (BERT's embeddings) -> Gather of the word,
position and segment tables, Adds, LayerNormalization; mask_index as the count of mask values equal to 1 per row (as ONNX Runtime counts).

Positions are 0..S-1 (a Slice of the position table) unless position_ids are given (a Gather).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.fused import FusedRule, attr, ints_proof_value
from trtconv.rewrites.transformer.std_forms import Ops, layer_norm

DEFAULT_EPSILON = 1e-12
INPUT_IDS, SEGMENT_IDS, WORD, POSITION, SEGMENT, GAMMA, BETA, MASK, POSITION_IDS = range(9)
INT32, INT64 = 6, 7


def _rows(values: Mapping[int, np.ndarray], index: int, fallback: int) -> int:
    table = values.get(index)
    return int(table.shape[0]) if table is not None and table.ndim == 2 else fallback


class EmbedLayerNormRule(FusedRule):
    name = "ms-embed-layernorm"
    description = "com.microsoft EmbedLayerNormalization -> Gather + Add + LayerNormalization"
    op = "EmbedLayerNormalization"
    float_input = WORD

    def refusal(self, view: NodeView) -> str | None:
        if view.has_output(1) and not view.has_input(MASK):
            return "its mask_index output is used but it has no mask input"
        if view.has_input(SEGMENT_IDS) != view.has_input(SEGMENT):
            return "segment_ids and segment_embedding must come together"
        return None

    def feed(self, view: NodeView, index: int, shape: tuple[int, ...], dtype: np.dtype,
             values: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        # ids index the tables (constants: their real sizes; otherwise PROOF_DIM rows)
        if index == INPUT_IDS:
            return ints_proof_value(shape, 0, _rows(values, WORD, 3), rng, dtype)
        if index == SEGMENT_IDS:
            return ints_proof_value(shape, 0, _rows(values, SEGMENT, 2), rng, dtype)
        if index == POSITION_IDS:
            return ints_proof_value(shape, 0, _rows(values, POSITION, 3), rng, dtype)
        if index == MASK:
            mask = ints_proof_value(shape, 0, 2, rng, dtype)
            if mask.ndim == 2:
                mask[:, 0] = 1
            return mask
        return super().feed(view, index, shape, dtype, values, rng)

    def output_shapes(self, view: NodeView) -> list[list[Any] | None]:
        ids, word = view.shapes.get(view.inputs[INPUT_IDS]), view.shapes.get(view.inputs[WORD])
        if ids is None or word is None or len(ids) != 2 or len(word) != 2:
            return [None, None, None]
        out = [*ids, word[1]]
        return [out, [ids[0]], out]

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        def at(i: int) -> gs.Tensor | None:
            return ins[i] if i < len(ins) else None

        ids, word, pos_table, gamma, beta = at(INPUT_IDS), at(WORD), at(POSITION), at(GAMMA), at(BETA)
        assert ids is not None and word is not None and pos_table is not None and gamma is not None
        emb = o.op("Gather", [word, ids], {"axis": 0})
        position_ids = at(POSITION_IDS)
        if position_ids is not None:
            pos = o.op("Gather", [pos_table, position_ids], {"axis": 0})
        else:
            pos = o.slice(pos_table, 0, o.dim(ids, 1), 0)  # rows 0..S-1, broadcast over the batch
        total = o.op("Add", [emb, pos], out=outs[2] if len(outs) > 2 and at(SEGMENT_IDS) is None else None)
        seg_ids, seg_table = at(SEGMENT_IDS), at(SEGMENT)
        if seg_ids is not None and seg_table is not None:
            seg = o.op("Gather", [seg_table, seg_ids], {"axis": 0})
            total = o.op("Add", [total, seg], out=outs[2] if len(outs) > 2 else None)
        layer_norm(o, total, gamma, beta, float(attr(view, "epsilon", DEFAULT_EPSILON)), out=outs[0])
        mask = at(MASK)
        if len(outs) > 1 and outs[1] is not None and mask is not None:
            ones = o.cast(o.op("Equal", [o.cast(mask, INT64), o.const(1, np.int64)]), INT32)
            o.reduce_sum(ones, [1], 0, out=outs[1])  # ONNX Runtime counts the mask values equal to 1 per row
        return "Gather+Add+LayerNormalization" if o.opset >= 17 else "Gather+Add+LayerNorm decomposition"
