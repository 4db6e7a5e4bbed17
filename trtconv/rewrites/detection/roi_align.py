"""``RoiAlign`` -> standard ops TensorRT-RTX builds: bilinear sampling with ``GridSample`` and a mean.

TensorRT-RTX 1.7 imports ``RoiAlign`` through the ``ROIAlign_TRT`` plugin, and RTX loads no
plugins ("Plugin not found"); TensorRT 10/11 import it, so the rule is for ``--trt rtx`` only
(``RewriteRule.targets``). ONNX Runtime's semantics, average mode, a fixed ``sampling_ratio``
(``sr``; the adaptive 0 makes the sample count depend on each box, which no static graph has):

1. per box, the ``oh*sr`` sample rows ``y1 + bin_h * (k + 0.5)/sr`` (``k = ph*sr + iy``) and the
   ``ow*sr`` columns likewise, from ``x1 = rois[:, 0] * spatial_scale - 0.5`` (``half_pixel``;
   no 0.5 for ``output_half_pixel``, which also makes the box at least 1x1);
2. ``GridSample`` of every image at all of them (``align_corners=1`` maps pixel ``p`` to
   ``2p/(size-1) - 1`` exactly; ``padding_mode="border"`` clamps to the edge as RoiAlign does for
   ``-1 <= p < 0`` and ``p > size-1``), times a mask that zeroes samples beyond ``-1`` or ``size``
   (RoiAlign's own rule);
3. the mean over each ``sr x sr`` bin; ``GatherND`` picks each box's image (``batch_indices``).

Every image is sampled at every box (N times the work for a batch of N; detectors export N=1).
Proven against ONNX Runtime's ``RoiAlign`` on random features and boxes, some outside the image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.errors import TrtconvError
from trtconv.rewrites.emitter import PENDING_DOMAIN, Emitter
from trtconv.rewrites.proof import NodeProofCase, Proof
from trtconv.rewrites.quantized.graphs import Original
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

GRIDSAMPLE_OPSET = 16
F32 = np.float32
PROOF_N, PROOF_C, PROOF_HW, PROOF_ROIS = 2, 3, (9, 11), 5


@dataclass(frozen=True)
class RoiMatch:
    oh: int
    ow: int
    sr: int
    scale: float
    half_pixel: bool  # coordinate_transformation_mode (half_pixel is the default from opset 16)
    original: Original


class RoiAlignRule(RewriteRule):
    name = "roialign-portable"
    description = "RoiAlign (average) -> GridSample sampling and a mean, no plugin (TensorRT-RTX)"
    ops = (("", "RoiAlign"),)
    targets = ("rtx",)

    def match(self, node: gs.Node, ctx: RuleContext) -> RoiMatch | None:
        a = node.attrs
        mode = a.get("mode", "avg")
        sr = int(a.get("sampling_ratio", 0))
        x = node.inputs[0]
        if (mode.decode() if isinstance(mode, bytes) else mode) != "avg" or sr <= 0 or \
                (x.dtype is not None and np.dtype(x.dtype) != np.float32):
            return None  # max mode, adaptive sampling, float16: left as they are
        ctm = a.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
        ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
        return RoiMatch(int(a.get("output_height", 1)), int(a.get("output_width", 1)), sr,
                        float(a.get("spatial_scale", 1.0)), ctm == "half_pixel", Original.of([node]))

    def emit(self, ctx: RuleContext, site: Site, match: RoiMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        x, rois, batch = site.inputs[:3]
        out = site.outputs[0]
        opset = max(ctx.opset, GRIDSAMPLE_OPSET)
        pending = PENDING_DOMAIN if ctx.opset < GRIDSAMPLE_OPSET else None

        def op(kind: str, name: str, ins: list[gs.Tensor], attrs: dict | None = None, dtype: object = F32,
               outs: list[gs.Tensor] | None = None) -> gs.Tensor:
            o = outs[0] if outs else em.var(name, dtype=dtype)
            em.node(kind, name, ins, [o], attrs, domain=pending)
            return o

        def const(name: str, v: object, dtype: object = F32) -> gs.Constant:
            return em.const(name, np.asarray(v, dtype=dtype))

        m = match
        shape = op("Shape", "x_shape", [x], dtype=np.int64)
        hw = op("Cast", "x_hw", [op("Gather", "x_hw_int", [shape, const("i23", [2, 3], np.int64)], {"axis": 0},
                                    np.int64)], {"to": 1})  # [H, W]
        box = op("Mul", "box_scaled", [op("Cast", "rois_float", [rois], {"to": 1}), const("scale", m.scale)])
        if m.half_pixel:
            box = op("Sub", "box_shifted", [box, const("half", 0.5)])
        lo = op("Gather", "box_lo", [box, const("i10", [1, 0], np.int64)], {"axis": 1})  # [R, 2]: y1, x1
        hi = op("Gather", "box_hi", [box, const("i32", [3, 2], np.int64)], {"axis": 1})  # [R, 2]: y2, x2
        size = op("Sub", "box_size", [hi, lo])
        if not m.half_pixel:
            size = op("Max", "box_size_min", [size, const("one", 1.0)])
        bins = op("Div", "bin_size", [size, const("bins", [m.oh, m.ow])])  # [R, 2]

        def axis(k: int, n: int, name: str) -> tuple[gs.Tensor, gs.Tensor]:
            """Sample positions along one axis [R, n*sr] and their validity mask."""
            start = op("Gather", f"{name}_start", [lo, const(f"{name}_i", [k], np.int64)], {"axis": 1})  # [R, 1]
            step = op("Gather", f"{name}_bin", [bins, const(f"{name}_j", [k], np.int64)], {"axis": 1})
            frac = const(f"{name}_fractions", (np.arange(n * m.sr) + 0.5) / m.sr)
            pos = op("Add", f"{name}_pos", [start, op("Mul", f"{name}_offsets", [step, frac])])
            limit = op("Gather", f"{name}_limit", [hw, const(f"{name}_k", k, np.int64)], {"axis": 0})
            inside = op("And", f"{name}_inside", [
                op("GreaterOrEqual", f"{name}_ge", [pos, const(f"{name}_minus1", -1.0)], dtype=np.bool_),
                op("LessOrEqual", f"{name}_le", [pos, limit], dtype=np.bool_)], dtype=np.bool_)
            norm = op("Sub", f"{name}_norm", [op("Div", f"{name}_unit", [
                op("Mul", f"{name}_twice", [pos, const(f"{name}_two", 2.0)]),
                op("Sub", f"{name}_last", [limit, const(f"{name}_1", 1.0)])]), const(f"{name}_one", 1.0)])
            return norm, op("Cast", f"{name}_mask", [inside], {"to": 1})

        ys, my = axis(0, m.oh, "y")  # [R, A]
        xs, mx = axis(1, m.ow, "x")  # [R, B]
        ys3 = op("Unsqueeze", "y_col", [ys, const("ax2", [2], np.int64)])  # opset >= 16 here: axes as input
        xs3 = op("Unsqueeze", "x_row", [xs, const("ax1", [1], np.int64)])
        zero = op("Mul", "zero_grid", [ys3, xs3])
        zero = op("Mul", "zero_plane", [zero, const("zero", 0.0)])  # [R, A, B] zeros, for broadcasting
        gx = op("Unsqueeze", "grid_x", [op("Add", "grid_x_full", [zero, xs3]), const("ax3", [3], np.int64)])
        gy = op("Unsqueeze", "grid_y", [op("Add", "grid_y_full", [zero, ys3]), const("ax3b", [3], np.int64)])
        grid = op("Concat", "grid_xy", [gx, gy], {"axis": 3})  # [R, A, B, 2]
        n = op("Gather", "x_n", [shape, const("i0", [0], np.int64)], {"axis": 0}, np.int64)
        grid = op("Reshape", "grid_flat", [grid, const("grid_shape", [1, -1, m.ow * m.sr, 2], np.int64)])
        grid = op("Expand", "grid_images", [grid, op("Concat", "grid_dims", [n, const("ones3", [1, 1, 1], np.int64)],
                                                       {"axis": 0}, np.int64)])
        sampled = op("GridSample", "sample", [x, grid],
                     {"align_corners": 1, "padding_mode": "border"})  # [N, C, R*A, B]
        mask = op("Mul", "mask", [op("Unsqueeze", "mask_y", [my, const("ax2m", [2], np.int64)]),
                                  op("Unsqueeze", "mask_x", [mx, const("ax1m", [1], np.int64)])])
        sampled = op("Mul", "masked", [sampled, op("Reshape", "mask_flat", [mask, const(
            "mask_shape", [1, 1, -1, m.ow * m.sr], np.int64)])])
        split = op("Reshape", "bins_split", [sampled, const("split_shape", [0, 0, -1, m.oh, m.sr, m.ow, m.sr],
                                                           np.int64)])
        if opset >= 18:
            mean = op("ReduceMean", "bin_mean", [split, const("axes", [4, 6], np.int64)], {"keepdims": 0})
        else:
            mean = op("ReduceMean", "bin_mean", [split], {"axes": [4, 6], "keepdims": 0})  # [N, C, R, oh, ow]
        per_box = op("Transpose", "per_box", [mean], {"perm": [2, 0, 1, 3, 4]})  # [R, N, C, oh, ow]
        index = op("Unsqueeze", "box_image", [op("Cast", "batch_int64", [batch], {"to": 7}, np.int64),
                                              const("ax1i", [1], np.int64)], dtype=np.int64)
        picked = op("GatherND", "pick_image", [per_box, index], {"batch_dims": 1})
        op("Identity", "out", [picked], outs=[out])
        return Emitted(tuple(em.nodes), "GridSample+ReduceMean (no plugin)",
                       pending_opset=GRIDSAMPLE_OPSET if pending else 0, pending_op="GridSample")

    def proof_case(self, ctx: RuleContext, site: Site, match: RoiMatch, emitted: Emitted) -> NodeProofCase | Proof:
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        x_t, rois_t, batch_t = site.inputs[:3]
        known = ctx.shapes.get(x_t.name) or []
        c = known[1] if len(known) == 4 and isinstance(known[1], int) else PROOF_C
        h, w = PROOF_HW
        x = rng.standard_normal((PROOF_N, c, h, w)).astype(F32)
        scale = match.scale
        xy1 = rng.uniform(-3, max(w, h) + 1, (PROOF_ROIS, 2))  # some boxes start or end outside the image
        wh = rng.uniform(0.3, 8, (PROOF_ROIS, 2))
        rois = (np.concatenate([xy1, xy1 + wh], axis=1) / scale).astype(F32)
        batch = rng.integers(0, PROOF_N, PROOF_ROIS).astype(np.int64)
        values = {x_t.name: x, rois_t.name: rois, batch_t.name: batch}
        out = site.outputs[0].name
        opset = max(ctx.opset, GRIDSAMPLE_OPSET)
        try:
            ref = match.original.run(values, out, max(ctx.opset, 10))
        except TrtconvError as exc:
            return Proof("none", False, reason=f"the original did not run in ONNX Runtime: {exc.message[:200]}")
        return NodeProofCase(emitted.nodes, out, values, ref.astype(np.float64), np.dtype(F32), opset,
                             rtol=ctx.settings.node_tolerance, shapes={"X": x.shape, "rois": rois.shape})
