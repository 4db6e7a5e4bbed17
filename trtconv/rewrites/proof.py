"""Numeric proofs: every rewrite is checked when it is made, not only in our tests.

Two kinds:

* **node proofs**: the replacement nodes alone, on random inputs of the node's channel
  counts with its real weights, against the float64 reference of the *original* op as
  its dialect defines it. ``DeformConv`` replacements run in ONNX Runtime; plugin nodes
  (no CPU implementation exists) run in onnx's reference evaluator with the plugin's
  contract (field names, input order) implemented over the same float64 reference, so a
  wrong field, order or pad split still fails.
* **graph proof**: the whole model before and after in ONNX Runtime on the same random
  inputs. Where a node cannot run in ONNX Runtime (a custom op, a plugin node), the graph
  is cut there in both models: its output becomes an input fed the same random data, so
  everything else (clean-ups, opset conversion) is still compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from trtconv.errors import InvalidModelError, TrtconvError, UsageError
from trtconv.load.model import PROTOBUF_LIMIT
from trtconv.load.shapes import override_input_shapes
from trtconv.reference.compare import OutputStats, compare_arrays
from trtconv.reference.ort import random_feeds, run, session
from trtconv.rewrites import dcn_portable
from trtconv.rewrites.dcn import DEFORMCONV_OPSET, PENDING_DOMAIN, ROLES, DcnNode, PluginSpec
from trtconv.rewrites.reference import DcnParams, modulated_deform_conv2d

NODE_RTOL = 1e-5  # max |err| <= NODE_RTOL * max(1, max |ref|)
GRAPH_RTOL = 1e-6
# Keep node proofs cheap: shrink spatial dims until columns (C*K*OH*OW) fit this.
MAX_COLUMN_ELEMENTS = 1 << 21
# The portable form samples through GridSample's normalised float32 coordinates, whose error
# grows with the feature map like every float32 DCN's (ONNX Runtime's DeformConv reaches the
# 1e-5 tolerance near 200x200 on random data); its graph holds no spatial size, so its proof
# runs at most this wide, where float32 positions are exact to well under the tolerance.
PORTABLE_PROOF_SIDE = 64
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft"}
# Targets made of standard ops, run in ONNX Runtime: the opset their nodes need.
ORT_TARGET_OPSETS = {"deformconv": DEFORMCONV_OPSET, dcn_portable.TARGET: dcn_portable.OPSET}


@dataclass(frozen=True)
class Proof:
    method: str  # "onnxruntime" | "reference-evaluator" | "none"
    passed: bool
    tolerance: float | None = None
    stats: tuple[OutputStats, ...] = ()
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "passed": self.passed,
            "tolerance": self.tolerance,
            "outputs": [s.to_json() for s in self.stats],
            "shapes": {k: list(v) for k, v in sorted(self.shapes.items())},
            "reason": self.reason,
        }

    @property
    def max_abs(self) -> float | None:
        return max((s.max_abs for s in self.stats), default=None)


def _export_nodes(nodes: Sequence[gs.Node]) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], list[str]]:
    """Node protos, constant inputs, and the names of the variables they read from outside."""

    protos: list[onnx.NodeProto] = []
    consts: dict[str, np.ndarray] = {}
    produced: set[str] = set()
    external: list[str] = []
    for n in nodes:
        protos.append(OnnxExporter.export_node(n))
        for t in n.inputs:
            if isinstance(t, gs.Constant):
                consts[t.name] = np.asarray(t.values)
            elif t.name and t.name not in produced and t.name not in external:
                external.append(t.name)
        produced.update(o.name for o in n.outputs)
    for p in protos:
        if p.domain == PENDING_DOMAIN:
            p.domain = ""
    return protos, consts, external


def _proof_shapes(dcn: DcnNode, weight_shape: tuple[int, ...], x_shape: Sequence[Any] | None,
                  max_side: int | None = None) -> dict[str, tuple[int, ...]]:
    cout, cin_g, kh, kw = weight_shape
    p = dcn.params
    c = cin_g * p.group
    # The model's spatial size when known and cheap, else a small odd size that still
    # exercises borders: offsets of a few pixels push samples outside the image.
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


def _plugin_op(spec: PluginSpec) -> type:
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


def prove_dcn(
    dcn: DcnNode,
    replacement: Sequence[gs.Node],
    output: str,
    constants: Mapping[str, np.ndarray],
    weight_shape: tuple[int, ...],
    x_shape: Sequence[Any] | None,
    target: str,
    plugin: PluginSpec | None,
    opset: int,
    seed: int,
    rtol: float = NODE_RTOL,
    dtype: np.dtype | None = None,
) -> Proof:
    """Run ``replacement`` on random inputs and compare with the reference of the original op.

    FP16 nodes are run in FP16 (inputs rounded to FP16 first, so both sides see the same
    numbers) and checked at ``max(rtol, 1e-2)``: FP16 keeps about three decimal digits.
    """
    dtype = np.dtype(dtype or np.float32)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)):
        return Proof("none", False, reason=f"cannot prove a DCN in {dtype} (float32/float16/float64 only)")
    if dtype == np.float16:
        rtol = max(rtol, 1e-2)
    shapes = _proof_shapes(dcn, weight_shape, x_shape,
                           PORTABLE_PROOF_SIDE if target == dcn_portable.TARGET else None)
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
    ref = modulated_deform_conv2d(values["x"], values["offset"], values.get("mask"), values["weight"],
                                  values.get("bias"), dcn.params)
    protos, consts, external = _export_nodes(replacement)
    by_name = {names[r]: v for r, v in values.items()}
    feeds = {n: by_name[n] for n in external if n not in consts}
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in sorted(consts.items())]
    g = helper.make_graph(
        protos, "proof",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(output, helper.np_dtype_to_tensor_dtype(dtype), None)],
        initializer=inits,
    )
    domains = sorted({p.domain for p in protos if p.domain not in ("", "ai.onnx")})
    opsets = [helper.make_opsetid("", max(opset, ORT_TARGET_OPSETS.get(target, 11)))]
    opsets += [helper.make_opsetid(d, 1) for d in domains]
    mini = helper.make_model(g, opset_imports=opsets, ir_version=9)
    method = "onnxruntime" if target in ORT_TARGET_OPSETS else "reference-evaluator"
    shapes_used = {r: tuple(v.shape) for r, v in values.items()}
    try:
        if target in ORT_TARGET_OPSETS:
            got = run(session(mini), feeds, [output])[output]
        else:

            assert plugin is not None
            evaluated = ReferenceEvaluator(mini, new_ops=[_plugin_op(plugin)]).run([output], feeds)
            got = np.asarray(evaluated[0])  # type: ignore[index]
        if got.shape != ref.shape:
            raise ValueError(f"output shape {got.shape} differs from the original's {ref.shape}")
    except Exception as exc:  # a replacement that cannot even run is a failed proof, not a crash
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Proof(method, False, None, (), shapes_used, f"replacement failed to run: {first[:300]}")
    stats = compare_arrays(output, ref, got)
    tol = rtol * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    passed = stats.nonfinite == 0 and stats.max_abs <= tol
    return Proof(method, passed, tol, (stats,), shapes_used)


# ---------------------------------------------------------------------------- graph proof


def _runnable(node: onnx.NodeProto) -> bool:
    if node.domain not in STANDARD_DOMAINS:
        return False
    if node.domain in ("", "ai.onnx"):
        return bool(onnx.defs.has(node.op_type))
    return True


def unrunnable_outputs(model: onnx.ModelProto) -> set[str]:
    return {o for n in model.graph.node if not _runnable(n) for o in n.output if o}


def _cut(model: onnx.ModelProto, cut: set[str], shapes: Mapping[str, tuple[list[Any], int]]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [n for n in out.graph.node if not (set(n.output) & cut)]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    produced = {o for n in keep for o in n.output}
    have = {i.name for i in out.graph.input}
    for name in sorted(cut):
        if name in produced or name in have:
            continue
        dims, elem = shapes[name]
        out.graph.input.append(helper.make_tensor_value_info(name, elem, dims))
    return out


def _known_shapes(model: onnx.ModelProto) -> dict[str, tuple[list[Any], int]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inferred = model
    out: dict[str, tuple[list[Any], int]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.elem_type:
            continue
        dims = [int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim]
        if all(isinstance(d, int) for d in dims):
            out[vi.name] = (dims, tt.elem_type)
    return out


def prove_graph(
    before: onnx.ModelProto,
    after: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]],
    extra_cuts: set[str],
    seed: int,
    rtol: float = GRAPH_RTOL,
) -> Proof:
    """Both models in ONNX Runtime on the same random inputs (cut where ORT cannot run a node).

    When no numbers can be compared (dynamic inputs without --shapes, inputs random data
    cannot drive), the rewritten model must at least still load wherever the original did.
    """
    proof = _compare_graphs(before, after, shapes, extra_cuts, seed, rtol)
    if proof.method == "none" and proof.passed and before.ByteSize() <= PROTOBUF_LIMIT:
        problem = _load_problem(before, after)
        if problem:
            return Proof("onnxruntime", False, reason=f"the rewritten model does not load in ONNX Runtime: {problem}")
    return proof


def _load_problem(before: onnx.ModelProto, after: onnx.ModelProto) -> str | None:

    if unrunnable_outputs(before) or unrunnable_outputs(after):
        return None
    try:
        session(before)
    except InvalidModelError:
        return None
    try:
        session(after)
    except InvalidModelError as exc:
        return exc.message
    return None


def _compare_graphs(
    before: onnx.ModelProto,
    after: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]],
    extra_cuts: set[str],
    seed: int,
    rtol: float = GRAPH_RTOL,
) -> Proof:

    if before.ByteSize() > PROTOBUF_LIMIT or after.ByteSize() > PROTOBUF_LIMIT:
        return Proof("none", True, reason="model over 2 GB: graph proof skipped (node proofs still ran)")
    cut = unrunnable_outputs(before) | unrunnable_outputs(after) | set(extra_cuts)
    try:
        if cut:

            fixed = override_input_shapes(after, shapes) if shapes else after
            known = _known_shapes(fixed)
            missing = sorted(c for c in cut if c not in known)
            if missing:
                return Proof("none", True, reason=f"graph proof skipped: shape of {missing[0]!r} unknown "
                             "(give --shapes for dynamic inputs)")
            before = _cut(before, cut, known)
            after = _cut(after, cut, known)
        feeds = random_feeds(before, shapes, seed=seed)
        ref = run(session(before), feeds)
        got = run(session(after), {k: v for k, v in feeds.items() if k in {i.name for i in after.graph.input}})
    except UsageError as exc:
        return Proof("none", True, reason=f"graph proof skipped: {exc.message}")
    except InvalidModelError as exc:
        return Proof("none", True, reason=f"graph proof skipped: {exc.message}")
    except TrtconvError:
        raise
    except Exception as exc:  # ORT refusing random data (e.g. an If on a sample rate): not provable here
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Proof("none", True, reason=f"graph proof skipped: ONNX Runtime failed on random inputs: {first[:200]}")
    stats = []
    passed = True
    tol = 0.0
    for name, r in ref.items():
        if name not in got:
            return Proof("onnxruntime", False, reason=f"output {name!r} missing after the rewrite")
        if r.shape != got[name].shape:
            return Proof("onnxruntime", False, reason=f"output {name!r} shape {got[name].shape} != {r.shape}")
        s = compare_arrays(name, r, got[name])
        t = rtol * max(1.0, float(np.abs(r.astype(np.float64)).max()) if r.size and r.dtype.kind in "fiu" else 1.0)
        tol = max(tol, t)
        passed = passed and s.nonfinite == 0 and s.max_abs <= t
        stats.append(s)
    reason = (f"cut at {len(cut)} tensor(s) ONNX Runtime cannot compute"
              + (" or node proofs hold" if extra_cuts else "") if cut else "")
    return Proof("onnxruntime", passed, tol, tuple(stats), {k: tuple(v.shape) for k, v in sorted(feeds.items())},
                 reason)
