"""``RoiAlign`` -> standard ops TensorRT-RTX builds: each sample's four bilinear corners gathered from
the features, weighted, then the mean (average mode) or the largest weighted corner (max mode).

TensorRT-RTX 1.7 imports ``RoiAlign`` through the ``ROIAlign_TRT`` plugin, and RTX loads no
plugins ("Plugin not found"); TensorRT 10/11 import it, so the rule is for ``--trt rtx`` only
(``RewriteRule.targets``). The form (:mod:`.roi_corners`) computes what ONNX Runtime's kernel
computes, in its order: the sample grid of each bin (``sampling_ratio``, or the adaptive
``ceil(roi_size / bins)``, bounded by the feature map), the clamped corners and weights, zero
outside ``[-1, size]``; average and max mode; ``half_pixel`` and ``output_half_pixel``. Each box
reads only its own image (one ``Gather`` from the features viewed as ``[N*H*W, C]``).

Why corners and not ``GridSample``: an earlier form sampled with ``GridSample`` (normalized
coordinates, ~3e-6 off ONNX Runtime); on torchvision's Mask and Keypoint R-CNN that difference
grew through the box heads past the whole-model proof's tolerance. The corner form matches
ONNX Runtime to the bit on the proofs measured, and needs no opset raise.

Proven against ONNX Runtime's ``RoiAlign`` on random features and boxes, some outside the image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from trtconv.rewrites.detection.roi_corners import (
    MAX_ADAPTIVE_SAMPLES,
    CornerSpec,
    adaptive_cost,
    emit_corners,
)
from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import NodeProofCase, Original, Proof
from trtconv.rewrites.rule import Emitted, NodeView, RewriteRule, RuleContext, Site

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
    max_mode: bool = False
    hw: tuple[int, int] | None = None  # the feature map's static H, W, when known

    @property
    def corners(self) -> CornerSpec:
        return CornerSpec(self.oh, self.ow, self.sr, self.scale, self.half_pixel, self.max_mode, self.hw)


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _static_hw(shape: object) -> tuple[int, int] | None:
    if isinstance(shape, (list, tuple)) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape[2:]):
        return int(shape[2]), int(shape[3])
    return None


class RoiAlignRule(RewriteRule):
    name = "roialign-portable"
    description = ("RoiAlign (average or max, fixed or adaptive sampling_ratio) -> gathered bilinear corners and a "
                   "mean or max, as ONNX Runtime computes it; no plugin (TensorRT-RTX)")
    ops = (("", "RoiAlign"),)
    targets = ("rtx",)

    def refusal(self, node: NodeView) -> str | None:
        if int(node.attrs.get("sampling_ratio", 0)) > 0:
            return None
        shape = node.shapes.get(node.inputs[0]) if node.has_input(0) else None
        if shape is None and node.partial:
            return None  # ``check`` without shapes: rewrite decides with them
        hw = _static_hw(shape)
        if hw is None:
            return ("sampling_ratio=0 (adaptive): each box's sample count depends on its size; trtconv bounds it by "
                    "the feature map's height and width, which are not static here (give static --shapes, or export "
                    "with a fixed sampling_ratio; torchvision uses 2)")
        oh, ow = int(node.attrs.get("output_height", 1)), int(node.attrs.get("output_width", 1))
        c = shape[1] if isinstance(shape[1], int) else 1
        cost = adaptive_cost(oh, ow, hw[0], hw[1], c)
        if cost > MAX_ADAPTIVE_SAMPLES:
            return (f"sampling_ratio=0 (adaptive) on a {hw[0]}x{hw[1]} feature map: up to {cost} corner values per "
                    f"box, over trtconv's limit of {MAX_ADAPTIVE_SAMPLES} (export with a fixed sampling_ratio; "
                    "torchvision uses 2)")
        return None

    def match(self, node: gs.Node, ctx: RuleContext) -> RoiMatch | None:
        a = node.attrs
        mode = _text(a.get("mode", "avg"))
        sr = int(a.get("sampling_ratio", 0))
        x = node.inputs[0]
        if mode not in ("avg", "max") or (x.dtype is not None and np.dtype(x.dtype) != np.float32):
            return None  # float16: left as it is
        hw = _static_hw(ctx.shapes.get(x.name) or x.shape)
        if sr <= 0 and hw is None:
            return None  # the refusal says why
        ctm = _text(a.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel"))
        return RoiMatch(int(a.get("output_height", 1)), int(a.get("output_width", 1)), max(sr, 0),
                        float(a.get("spatial_scale", 1.0)), ctm == "half_pixel", Original.of([node]),
                        mode == "max", hw)

    def emit(self, ctx: RuleContext, site: Site, match: RoiMatch) -> Emitted:
        em = Emitter(ctx.graph, site.name)
        emit_corners(em, ctx.opset, match.corners, *site.inputs[:3], site.outputs[0])
        what = "largest weighted corner" if match.max_mode else "mean"
        how = "adaptive samples bounded by the feature map" if match.sr == 0 else f"{match.sr}x{match.sr} samples"
        return Emitted(tuple(em.nodes), f"Gather of bilinear corners + {what} ({how}; no plugin)")

    def proof_case(self, ctx: RuleContext, site: Site, match: RoiMatch, emitted: Emitted) -> NodeProofCase | Proof:
        rng = np.random.default_rng(ctx.settings.seed + site.index)
        x_t, rois_t, batch_t = site.inputs[:3]
        known = ctx.shapes.get(x_t.name) or []
        c = known[1] if len(known) == 4 and isinstance(known[1], int) else PROOF_C
        h, w = match.hw if match.sr == 0 and match.hw else PROOF_HW  # the adaptive bound is the model's map
        scale = match.scale
        # boxes and image indices the model holds as constants are proven as they are (the emitted nodes read them)
        fixed_rois = rois_t.values if isinstance(rois_t, gs.Constant) else None
        fixed_batch = batch_t.values if isinstance(batch_t, gs.Constant) else None
        n_rois = len(fixed_rois) if fixed_rois is not None else len(fixed_batch) if fixed_batch is not None \
            else PROOF_ROIS
        n = max(PROOF_N, int(np.max(fixed_batch)) + 1 if fixed_batch is not None and fixed_batch.size else 0)
        x = rng.standard_normal((n, c, h, w)).astype(F32)
        xy1 = rng.uniform(-3, max(w, h) + 1, (n_rois, 2))  # some boxes start or end outside the image
        wh = rng.uniform(0.3, 8 if match.sr else 3 * max(h, w), (n_rois, 2))  # adaptive: several samples a bin
        rois = (np.asarray(fixed_rois, F32) if fixed_rois is not None
                else (np.concatenate([xy1, xy1 + wh], axis=1) / scale).astype(F32))
        batch = (np.asarray(fixed_batch, np.int64) if fixed_batch is not None
                 else rng.integers(0, n, n_rois).astype(np.int64))
        values = {t.name: v for t, v in ((x_t, x), (rois_t, rois), (batch_t, batch)) if not isinstance(t, gs.Constant)}
        out = site.outputs[0].name
        ref = match.original.run(values, out, ctx.opset)
        return NodeProofCase(emitted.nodes, out, values, ref.astype(np.float64), np.dtype(F32), ctx.opset,
                             rtol=ctx.settings.node_tolerance, shapes={"X": x.shape, "rois": rois.shape})
