"""The DCN rewrite rule: a deformable convolution in any dialect (:mod:`.dialects`) becomes
the chosen target (:mod:`.targets`), proven against the float64 reference of the *original*
op (:mod:`.deform_math`).

One :class:`DcnRule` per dialect; the catalog makes them from ``DIALECTS``. The proof feeds the
replacement random data of the node's channel counts with its real weights: plugin nodes (no
CPU implementation exists) run in onnx's reference evaluator with the plugin's contract (field
names, input order, weight layout) implemented over the same reference, so a wrong field,
order or pad split still fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper
from onnx.reference.op_run import OpRun

from trtconv.errors import UnsupportedModelError
from trtconv.onnxutil import normalize_domain
from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d
from trtconv.rewrites.dcn.dialects import DcnNode, Dialect
from trtconv.rewrites.dcn.lowering import DcnInputs, DcnTarget
from trtconv.rewrites.dcn.plugin_spec import ROLES, PluginSpec
from trtconv.rewrites.dcn.targets import TARGETS
from trtconv.rewrites.emitter import Emitter
from trtconv.rewrites.proof import ONNXRUNTIME, REFERENCE_EVALUATOR, NodeProofCase, Proof
from trtconv.rewrites.rewrite_settings import RewriteSettings
from trtconv.rewrites.rule import Emitted, RewriteRule, RuleContext, Site

# Keep node proofs cheap: shrink spatial dims until columns (C*K*OH*OW) fit this.
MAX_COLUMN_ELEMENTS = 1 << 21
MIN_PROOF_OPSET = 11  # plugin proofs: the default-domain opset of the proof model, at least


@dataclass(frozen=True)
class DcnMatch:
    dcn: DcnNode
    target: DcnTarget
    spec: PluginSpec | None  # the plugin node's spec, for plugin targets

    def proof_case(self, replacement: Sequence[gs.Node], output: str, values: Mapping[str, np.ndarray],
                   opset: int, rtol: float) -> NodeProofCase:
        """The node proof of a replacement: ``values`` by role (one dtype), the float64 reference of
        the original op as expected; plugin nodes run through their spec's contract."""
        d = self.dcn
        names = {"x": d.x, "offset": d.offset, "mask": d.mask, "weight": d.weight, "bias": d.bias}
        expected = modulated_deform_conv2d(values["x"], values["offset"], values.get("mask"), values["weight"],
                                           values.get("bias"), d.params)
        plugin = self.target.opset == 0
        return NodeProofCase(
            replacement=replacement, output=output, values={names[r]: v for r, v in values.items()},
            expected=expected, dtype=values["x"].dtype, opset=opset if plugin else max(opset, self.target.opset),
            runner=REFERENCE_EVALUATOR if plugin else ONNXRUNTIME,
            custom_ops=(plugin_reference_op(self.spec),) if plugin and self.spec is not None else (),
            rtol=rtol, shapes={r: tuple(v.shape) for r, v in values.items()},
        )


class DcnRule(RewriteRule):
    """Deformable convolutions of one dialect -> the target ``RewriteSettings.dcn_target`` names."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.name = dialect.rule
        self.description = dialect.description
        self.ops = dialect.ops

    def prepare(self, model: onnx.ModelProto, settings: RewriteSettings, large: bool) -> onnx.ModelProto:
        target = TARGETS[settings.dcn_target]
        if target.prepare is None or large or not any(
                (normalize_domain(n.domain), n.op_type) in self.ops for n in model.graph.node):
            return model
        return target.prepare(model)

    def match(self, node: gs.Node, ctx: RuleContext) -> DcnMatch | None:
        dcn = self.dialect.read_checked(node)
        if dcn is None:
            return None
        target = TARGETS[ctx.settings.dcn_target]
        if self.dialect.native_target == target.name and not _asymmetric(dcn):
            return None  # TensorRT imports it as is
        return DcnMatch(dcn, target, target.plugin(ctx.settings.dcn_plugin))

    def emit(self, ctx: RuleContext, site: Site, match: DcnMatch) -> Emitted:
        dcn, target, spec = match.dcn, match.target, match.spec
        t = ctx.tensors
        out = site.outputs[0]
        _annotate_output(out, ctx.shapes, dcn, _weight_shape(ctx, dcn), t)
        em = Emitter(ctx.graph, site.name)
        io = DcnInputs(t[dcn.x], t[dcn.offset], t[dcn.mask] if dcn.mask else None, t[dcn.weight],
                       t[dcn.bias] if dcn.bias else None)
        target.emit(em, dcn, io, out, spec)
        notes = list(dcn.notes)
        if _asymmetric(dcn):
            note = target.pads_note(dcn.params.pads, spec)
            if note:
                notes.append(note)
        p = dcn.params
        if target.trt_modulated_deform_conv and (p.stride[0] != p.stride[1] or p.dilation[0] != p.dilation[1]
                                                 or p.pads[0] != p.pads[1]):
            notes.append("anisotropic stride/padding/dilation: TensorRT's ModulatedDeformConv2d may swap "
                         "h and w (by code reading); verify the engine with `trtconv verify`")
        cuts = frozenset({out.name}) if target.cut_graph_proof else frozenset()
        return Emitted(tuple(em.nodes), target.name, tuple(notes), target.opset, target.opset_op, cuts)

    def proof_case(self, ctx: RuleContext, site: Site, match: DcnMatch, emitted: Emitted) -> NodeProofCase | Proof:
        dcn, target = match.dcn, match.target
        wshape = _weight_shape(ctx, dcn)
        if len(wshape) != 4 or not all(isinstance(d, int) for d in wshape):
            raise UnsupportedModelError(
                f"node {site.name!r} ({site.op}): the weight's shape is unknown, so the rewrite cannot be proven",
                hint="give --shapes for dynamic inputs, or --no-verify to skip the proof",
            )
        dtype = np.dtype(_dtype(ctx.tensors.get(dcn.x), ctx.tensors.get(dcn.weight)) or np.float32)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)):
            return Proof("none", False, reason=f"cannot prove a DCN in {dtype} (float32/float16/float64 only)")
        consts = {t.name: np.asarray(t.values) for t in site.inputs if isinstance(t, gs.Constant)}
        xt = ctx.tensors.get(dcn.x)  # an earlier DCN's output: shaped by _annotate_output only
        xshape = ctx.shapes.get(dcn.x) or (list(xt.shape) if xt is not None and xt.shape is not None else None)
        values = proof_inputs(dcn, wshape, xshape, consts, dtype, ctx.settings.seed + site.index,
                              target.proof_max_side)
        return match.proof_case(emitted.nodes, site.outputs[0].name, values, max(ctx.opset, MIN_PROOF_OPSET),
                                ctx.settings.node_tolerance)


def _asymmetric(dcn: DcnNode) -> bool:
    return dcn.params.pads[:2] != dcn.params.pads[2:]


def _weight_shape(ctx: RuleContext, dcn: DcnNode) -> tuple[Any, ...]:
    wt = ctx.tensors.get(dcn.weight)
    return tuple(wt.shape) if isinstance(wt, gs.Constant) else tuple(ctx.shapes.get(dcn.weight) or ())


def _dtype(*candidates: gs.Tensor | None) -> np.dtype | None:
    for t in candidates:
        if t is not None and t.dtype is not None:
            try:
                return np.dtype(t.dtype)
            except TypeError:
                continue
    return None


def _annotate_output(out: gs.Tensor, shapes: Mapping[str, list[Any]], d: DcnNode, wshape: tuple[Any, ...],
                     tensors: Mapping[str, gs.Tensor]) -> None:
    """Give the DCN output its shape [N, Cout, OH, OW], so shape inference (and proofs) go past a plugin node."""
    if not isinstance(out, gs.Variable):
        return
    xs, offs = shapes.get(d.x), shapes.get(d.offset)
    have = list(out.shape) if out.shape is not None and len(out.shape) == 4 else [None] * 4
    if xs and offs and len(xs) == 4 and len(offs) == 4 and wshape:
        dims = [xs[0], wshape[0], offs[2], offs[3]]
        merged = [d if isinstance(d, int) else h if h is not None else d for d, h in zip(dims, have)]
        if all(isinstance(v, (int, str)) for v in merged):
            out.shape = merged
    if out.dtype is None:
        x = tensors.get(d.x)
        if x is not None and x.dtype is not None:
            out.dtype = x.dtype


def proof_shapes(dcn: DcnNode, weight_shape: tuple[int, ...], x_shape: Sequence[Any] | None,
                 max_side: int | None = None) -> dict[str, tuple[int, ...]]:
    """Input shapes of a node proof, by role. The model's spatial size when known and cheap
    (and at most ``max_side``), else a small odd size that still exercises borders: offsets
    of a few pixels push samples outside the image."""
    cout, cin_g, kh, kw = weight_shape
    p = dcn.params
    c = cin_g * p.group
    h = w = None
    if x_shape and len(x_shape) == 4 and isinstance(x_shape[2], int) and isinstance(x_shape[3], int):
        h, w = int(x_shape[2]), int(x_shape[3])
    min_h = p.dilation[0] * (kh - 1) + 1 - p.pads[0] - p.pads[2]
    min_w = p.dilation[1] * (kw - 1) + 1 - p.pads[1] - p.pads[3]
    if h is None or w is None:
        h, w = max(min_h, 1) + 2 * p.stride[0] + 4, max(min_w, 1) + 2 * p.stride[1] + 6
    if max_side is not None:
        h, w = min(h, max(max_side, min_h + 2)), min(w, max(max_side, min_w + 2))
    while True:
        oh, ow = p.out_hw(h, w, kh, kw)
        if c * kh * kw * oh * ow <= MAX_COLUMN_ELEMENTS or (h <= max(min_h, 1) + 8 and w <= max(min_w, 1) + 8):
            break
        h, w = max(max(min_h, 1) + 3, h // 2 + 1), max(max(min_w, 1) + 5, w // 2 + 1)
    oh, ow = p.out_hw(h, w, kh, kw)
    k = kh * kw * p.deformable_group
    return {"x": (1, c, h, w), "offset": (1, 2 * k, oh, ow), "mask": (1, k, oh, ow), "weight": tuple(weight_shape),
            "bias": (cout,)}


def proof_inputs(dcn: DcnNode, weight_shape: tuple[int, ...], x_shape: Sequence[Any] | None,
                 constants: Mapping[str, np.ndarray], dtype: np.dtype, seed: int,
                 max_side: int | None = None) -> dict[str, np.ndarray]:
    """Values by role: the node's constants (its real weights), random data for the rest."""
    shapes = proof_shapes(dcn, weight_shape, x_shape, max_side)
    rng = np.random.default_rng(seed)
    names = {"x": dcn.x, "offset": dcn.offset, "mask": dcn.mask, "weight": dcn.weight, "bias": dcn.bias}
    values: dict[str, np.ndarray] = {}
    for role in ROLES:
        name = names[role]
        if not name:
            continue
        if name in constants:
            values[role] = np.asarray(constants[name]).astype(dtype)
        elif role == "mask":
            values[role] = rng.random(shapes[role]).astype(dtype)
        elif role == "offset":
            # several pixels: some samples land outside the image, some on its border
            values[role] = (rng.standard_normal(shapes[role]) * 2.5).astype(dtype)
        else:
            values[role] = rng.standard_normal(shapes[role]).astype(dtype)
    return values


def plugin_reference_op(spec: PluginSpec) -> type[OpRun]:
    """An onnx reference-evaluator op that does what the plugin's contract says it does."""

    def _run(self: Any, *inputs: np.ndarray, **_kw: Any) -> tuple[np.ndarray]:
        attrs = {a.name: helper.get_attribute_value(a) for a in self.onnx_node.attribute}
        for name, _value in spec.constants:
            if name not in attrs:
                raise ValueError(f"plugin node lacks required attribute {name!r}")
        vals = dict(zip(spec.inputs, inputs))
        fields = {role: [int(v) for v in np.atleast_1d(attrs[name])] for name, role in spec.fields}
        pad = fields["pads"] if "pads" in fields else fields["padding"] * 2
        params = DcnParams(
            stride=(fields["stride"][0], fields["stride"][1]),
            pads=(pad[0], pad[1], pad[2], pad[3]),
            dilation=(fields["dilation"][0], fields["dilation"][1]),
            group=fields["group"][0],
            deformable_group=fields["deformable_group"][0],
        )
        w = vals["weight"]
        if spec.weight_layout == "OHWI":
            w = np.transpose(w, (0, 3, 1, 2))
        x = vals["x"]
        y = modulated_deform_conv2d(x, vals["offset"], vals.get("mask"), w, vals.get("bias"), params)
        return (y.astype(x.dtype),)

    return type(spec.name, (OpRun,), {"op_domain": spec.domain, "_run": _run})
