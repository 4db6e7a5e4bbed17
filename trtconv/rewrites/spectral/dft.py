"""``DFT`` -> one ``MatMul`` by the transform's cosine and sine matrix, for targets whose ONNX parser has no
``DFT``: TensorRT-RTX 1.7 and TensorRT 10 (TensorRT 11.2.1 imports it as a cuFFT plugin, so the rule is not
applied there).

A DFT of a fixed length ``L`` along one axis is a linear map, ``X[k] = sum_n x[n] exp(-2 pi i k n / L)`` (the
inverse: ``+``, and ``/ L``). With the signal axis moved next to the last one (real and imaginary parts, or the
real value alone) and the two flattened, it is one ``MatMul`` by a constant ``[L * c, K * 2]`` matrix (``c``: 1
real or 2 complex input values; ``K``: ``L``, or ``L // 2 + 1`` one-sided), computed in float64 and stored in
float32. A speech front-end's frames (400 to 512 samples) take a matrix of 0.2 to 0.5 M values; a DFT whose
matrix would pass :data:`MAX_ELEMENTS` is left as it is, and the refusal says so. The frames are cut or padded
to ``dft_length`` first, as the op does.

Opset 17 (``axis`` an attribute) and 20 (``axis`` an input, a constant here). Proven against ONNX Runtime's
``DFT`` on random signals; the whole graph at float32's tolerance for reordered sums (``Emitted.reorders_sums``):
against numpy's float64 FFT, ONNX Runtime's DFT is off by 2.5e-6 to 3.3e-6 of the largest value at lengths
that are not a power of two (20, 30), the matrix product by 1e-7 (tests/rewrites/test_dft.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Original, Proof
from trtconv.rewrites.rule import Emitted, NodeView, RewriteRule, RuleContext, Site

F32 = np.float32
I64 = np.int64
MAX_ELEMENTS = 1 << 24  # values of the transform matrix (64 MiB in float32): an 8192-point real DFT fits
PROOF_BATCH = 3


@dataclass(frozen=True)
class DftMatch:
    shape: tuple[int | str | None, ...]  # the input's shape (the signal axis and the last one static)
    axis: int  # the signal axis, non-negative, before the last
    length: int  # L: dft_length, or the signal axis' size
    inverse: bool
    onesided: bool
    original: Original

    @property
    def values(self) -> int:  # c: 1 real, 2 complex
        return int(self.shape[-1])  # type: ignore[arg-type]

    @property
    def bins(self) -> int:  # K
        return self.length // 2 + 1 if self.onesided else self.length

    @property
    def size(self) -> int:  # N: the signal axis as given
        return int(self.shape[self.axis])  # type: ignore[arg-type]


def matrix(length: int, values: int, inverse: bool, onesided: bool) -> np.ndarray:
    """``[L * c, K * 2]``: row ``n * c + j`` (sample ``n``, real ``j = 0`` / imaginary ``j = 1``), column
    ``k * 2 + p`` (bin ``k``, real ``p = 0`` / imaginary ``p = 1``)."""
    bins = length // 2 + 1 if onesided else length
    n = np.arange(length, dtype=np.float64)[:, None]
    k = np.arange(bins, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * ((n * k) % length) / length  # the product reduced first: exact angles for long frames
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(angle), sign * np.sin(angle)
    w = np.zeros((length, values, bins, 2))
    w[:, 0, :, 0], w[:, 0, :, 1] = cos, sin  # (a) e^{s i t}: real a cos, imaginary a s sin
    if values == 2:
        w[:, 1, :, 0], w[:, 1, :, 1] = -sin, cos  # (i b) e^{s i t}: real -b s sin, imaginary b cos
    if inverse:
        w /= length
    return w.reshape(length * values, bins * 2).astype(F32)


def _constant(t: gs.Tensor | None) -> int | None:
    if isinstance(t, gs.Constant) and np.asarray(t.values).size == 1:
        return int(np.asarray(t.values).reshape(-1)[0])
    return None


class DftRule(RewriteRule):
    name = "dft-matmul"
    description = ("DFT (real or complex, forward or inverse, one-sided, any dft_length) -> one MatMul by the "
                   "transform's cosine/sine matrix (TensorRT-RTX and TensorRT 10 have no DFT)")
    ops = (("", "DFT"),)
    targets = ("rtx", "10.16")
    opsets = (17, 10_000)

    def refusal(self, node: NodeView) -> str | None:
        shape = node.shapes.get(node.inputs[0]) if node.has_input(0) else None
        if shape is None:
            return None if node.partial else "the input's shape is not known (give --shapes)"
        return _problem(node.attrs, shape, node.opset, None, None, node.has_input(1), node.has_input(2), node.partial)

    def match(self, node: gs.Node, ctx: RuleContext) -> DftMatch | None:
        x = node.inputs[0]
        if x.dtype is not None and np.dtype(x.dtype) != F32:
            return None  # float16/float64: left as it is
        shape = ctx.shapes.get(x.name) or (list(x.shape) if x.shape is not None else None)
        if shape is None:
            return None
        ins = list(node.inputs) + [None, None]
        length_t = ins[1] if len(node.inputs) > 1 and node.inputs[1].name else None
        axis_t = ins[2] if len(node.inputs) > 2 and node.inputs[2].name else None
        if _problem(node.attrs, shape, ctx.opset, length_t, axis_t, length_t is not None, axis_t is not None, False):
            return None
        rank = len(shape)
        axis = _axis(node.attrs, ctx.opset, axis_t) % rank
        given = _constant(length_t) if length_t is not None else None
        length = int(shape[axis]) if given is None else given
        return DftMatch(tuple(shape), axis, length, bool(node.attrs.get("inverse", 0)),
                        bool(node.attrs.get("onesided", 0)), Original.of([node]))

    def emit(self, ctx: RuleContext, site: Site, match: DftMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        rank, axis, c = len(match.shape), match.axis, match.values
        x = site.inputs[0]
        perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]  # the signal axis next to the last
        if axis != rank - 2:
            moved = em.var("moved", dtype=F32)
            em.node("Transpose", "move", [x], [moved], {"perm": perm})
            x = moved
        if match.length < match.size:  # cut to dft_length
            cut = em.var("cut", dtype=F32)
            em.node("Slice", "cut", [x, em.const("cut_start", np.array([0], I64)),
                                    em.const("cut_end", np.array([match.length], I64)),
                                    em.const("cut_axis", np.array([rank - 2], I64))], [cut])
            x = cut
        elif match.length > match.size:  # zero-padded to dft_length
            pads = np.zeros(2 * rank, I64)
            pads[rank + rank - 2] = match.length - match.size
            padded = em.var("padded", dtype=F32)
            em.node("Pad", "pad", [x, em.const("pads", pads)], [padded])
            x = padded
        flat = em.var("frames", dtype=F32)
        em.node("Reshape", "flatten", [x, em.const("flat_shape", np.array([0] * (rank - 2) + [match.length * c], I64))],
                [flat])
        spectrum = em.var("spectrum", dtype=F32)
        em.node("MatMul", "transform", [flat, em.const("matrix", matrix(match.length, c, match.inverse,
                                                                        match.onesided))], [spectrum])
        out = site.outputs[0]
        split = em.const("bins_shape", np.array([0] * (rank - 2) + [match.bins, 2], I64))
        if axis == rank - 2:
            em.node("Reshape", "bins", [spectrum, split], [out])
        else:
            bins = em.var("bins", dtype=F32)
            em.node("Reshape", "bins", [spectrum, split], [bins])
            em.node("Transpose", "move_back", [bins], [out], {"perm": [int(d) for d in np.argsort(perm)]})
        kind = ("inverse " if match.inverse else "") + ("one-sided " if match.onesided else "")
        return Emitted(tuple(em.nodes), f"MatMul by the {kind}DFT matrix [{match.length * c}, {match.bins * 2}]",
                       reorders_sums=True)

    def proof_case(self, ctx: RuleContext, site: Site, match: DftMatch, emitted: Emitted) -> NodeProofCase | Proof:
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        shape = tuple(d if isinstance(d, int) and d > 0 else PROOF_BATCH for d in match.shape)
        x = rng.standard_normal(shape).astype(F32)
        name = site.inputs[0].name
        out = site.outputs[0].name
        ref = match.original.run({name: x}, out, ctx.opset)
        return NodeProofCase(emitted.nodes, out, {name: x}, ref.astype(np.float64), np.dtype(F32), ctx.opset,
                             rtol=ctx.settings.node_tolerance, shapes={"input": shape})


def _axis(attrs: Mapping[str, Any], opset: int, axis_t: gs.Tensor | None) -> int:
    if opset >= 20:
        given = _constant(axis_t) if axis_t is not None else None
        return -2 if given is None else given
    return int(attrs.get("axis", 1))


def _problem(attrs: Mapping[str, Any], shape: Sequence[Any], opset: int, length_t: gs.Tensor | None, axis_t: gs.Tensor | None,
             has_length: bool, has_axis: bool, partial: bool) -> str | None:
    """Why a DFT cannot become the matrix product, or None. ``length_t``/``axis_t``: the inputs as imported
    (``rewrite``), None where only their presence is known (``check``: then their values are not asked).
    ``partial``: ``check`` without the shapes ``rewrite`` may have (a signal length it does not know is no reason)."""
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        return "the input's last dimension is not a known 1 (real) or 2 (complex)"
    if opset >= 20 and has_axis and axis_t is not None and _constant(axis_t) is None:
        return "axis is not a constant"
    if has_length and length_t is not None and _constant(length_t) is None:
        return "dft_length is not a constant"
    if opset >= 20 and has_axis and axis_t is None:
        return None  # ``check``: the axis is an input whose value it does not read; rewrite decides
    axis = int(attrs.get("axis", 1)) if opset < 20 else _axis(attrs, opset, axis_t)
    if not -rank <= axis < rank or axis % rank == rank - 1:
        return f"axis {axis} is not a signal axis of a rank-{rank} input"
    n = shape[axis % rank]
    if not isinstance(n, int) or n <= 0:
        return None if partial else "the signal axis' length is not static (give --shapes)"
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if onesided and (inverse or shape[-1] == 2):
        return "one-sided output of an inverse or complex DFT (ONNX defines none)"
    length = _constant(length_t) if length_t is not None else n
    if length is None or length <= 0:
        return None if has_length and length_t is None else "dft_length is not positive"
    elements = length * int(shape[-1]) * (length // 2 + 1 if onesided else length) * 2
    if elements > MAX_ELEMENTS:
        return f"a {length}-point DFT's matrix holds {elements} values, over trtconv's limit of {MAX_ELEMENTS}"
    return None
