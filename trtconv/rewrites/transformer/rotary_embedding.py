"""``com.microsoft::RotaryEmbedding`` (RoPE) -> Gather of the cos/sin caches at the positions,
then the rotation in Slice/Mul/Sub/Add/Concat: rotate-half (``interleaved=0``) or pairwise
(``interleaved=1``, strided Slices re-interleaved by Concat + Reshape).

Input (B, S, N*h) or (B, N, S, h); position_ids (1,) (a start offset: positions p0..p0+S-1)
or (B, S). Declined with the reason: partial rotation (rotary_embedding_dim < head size),
packed batching, a scale other than 1, unknown ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.rule import NodeView
from trtconv.rewrites.transformer.attention import shape_of
from trtconv.rewrites.transformer.fused import FusedRule, attr, ints_proof_value
from trtconv.rewrites.transformer.std_forms import Ops

INPUT, POSITION_IDS, COS, SIN = range(4)
INT64 = 7


class RotaryEmbeddingRule(FusedRule):
    name = "ms-rotary-embedding"
    description = "com.microsoft RotaryEmbedding -> Gather + Mul/Add rotation"
    op = "RotaryEmbedding"

    def half(self, view: NodeView) -> int | None:
        cos = shape_of(view, COS)
        return cos[1] if cos is not None and len(cos) == 2 and isinstance(cos[1], int) else None

    def refusal(self, view: NodeView) -> str | None:
        if int(attr(view, "is_packed_batching", 0)):
            return "is_packed_batching=1 is not rewritten"
        if float(attr(view, "scale", 1.0)) != 1.0:
            return "a scale other than 1 is not rewritten"
        if view.partial and (view.rank(INPUT) is None or view.rank(POSITION_IDS) is None):
            return None
        if view.rank(INPUT) not in (3, 4) or view.rank(POSITION_IDS) not in (1, 2):
            return "the input's or position_ids' rank is unknown or unsupported (give --shapes)"
        half = self.half(view)
        if half is None:
            return None if view.partial else "the cos cache's shape is unknown"
        dim = int(attr(view, "rotary_embedding_dim", 0))
        x = shape_of(view, INPUT)
        head = x[-1] if x is not None and view.rank(INPUT) == 4 else None
        if dim and dim != 2 * half or (isinstance(head, int) and head != 2 * half):
            return "partial rotation (rotary_embedding_dim smaller than the head size) is not rewritten"
        return None

    def feed(self, view: NodeView, index: int, shape: tuple[int, ...], dtype: np.dtype,
             values: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        if index == POSITION_IDS:
            rows = values[COS].shape[0] if COS in values else 8
            x = values.get(INPUT)
            seq = (x.shape[1] if x.ndim == 3 else x.shape[2]) if x is not None else 3
            if len(shape) == 1:
                return ints_proof_value(shape, 0, rows - seq + 1, rng, dtype)
            return ints_proof_value(shape, 0, rows, rng, dtype)
        return super().feed(view, index, shape, dtype, values, rng)

    def write(self, o: Ops, view: NodeView, ins: Sequence[gs.Tensor | None], outs: Sequence[gs.Tensor | None]) -> str:
        x, pos_ids, cos_cache, sin_cache = ins[0], ins[1], ins[2], ins[3]
        assert x is not None and pos_ids is not None and cos_cache is not None and sin_cache is not None
        half = self.half(view)
        assert half is not None
        rank, head = view.rank(INPUT), 2 * half
        if view.rank(POSITION_IDS) == 1:  # a start offset: positions p0 .. p0 + S - 1
            p0 = o.cast(o.op("Gather", [pos_ids, o.const(0, np.int64)], {"axis": 0}), INT64)
            s = o.scalar_dim(x, 1 if rank == 3 else 2)
            positions = o.op("Range", [p0, o.op("Add", [p0, s]), o.const(1, np.int64)])  # (S,)
            axes = [1] if rank == 3 else []  # (S, h/2) -> (S, 1, h/2) against (B, S, N, h/2)
        else:
            positions = pos_ids  # (B, S)
            axes = [2] if rank == 3 else [1]
        cos = o.op("Gather", [cos_cache, positions], {"axis": 0})
        sin = o.op("Gather", [sin_cache, positions], {"axis": 0})
        if axes:
            cos, sin = o.unsqueeze(cos, axes), o.unsqueeze(sin, axes)
        xh = o.op("Reshape", [x, o.ints([0, 0, -1, head])]) if rank == 3 else x
        interleaved = bool(int(attr(view, "interleaved", 0)))
        if interleaved:
            a, b = o.slice(xh, 0, head, -1, 2), o.slice(xh, 1, head, -1, 2)
        else:
            a, b = o.slice(xh, 0, half, -1), o.slice(xh, half, head, -1)
        ra = o.op("Sub", [o.op("Mul", [a, cos]), o.op("Mul", [b, sin])])
        rb = o.op("Add", [o.op("Mul", [b, cos]), o.op("Mul", [a, sin])])
        final = outs[0] if rank == 4 else None
        if interleaved:
            pairs = o.op("Concat", [o.unsqueeze(ra, [-1]), o.unsqueeze(rb, [-1])], {"axis": -1})
            y = o.op("Reshape", [pairs, o.ints([0, 0, 0, head])], out=final)
        else:
            y = o.op("Concat", [ra, rb], {"axis": -1}, out=final)
        if rank == 3:
            o.op("Reshape", [y, o.ints([0, 0, -1])], out=outs[0])
        return "Gather+Mul/Add rotation" + (" (interleaved)" if interleaved else "")
