"""Calibration outputs: any tensor of a model, subgraph values included, made a graph output.

ONNX Runtime returns only graph outputs. A value inside an ``If`` branch becomes an extra
branch output (the other branch yields an empty tensor), then an extra ``If`` output, up
to the main graph; inside a ``Loop`` body it becomes an extra scan output. Calibration,
the FP16 activation peaks and the per-layer sensitivity all read tensors this way.
A model without subgraphs is not copied: its outputs are lent to it while a session is made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtconv.onnxutil import fresh_name, has_subgraphs, model_names
from trtconv.reference import ort


def expose_tensors(model: onnx.ModelProto, tensors: Sequence[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy whose graph outputs include ``tensors`` (subgraph values too); output name → tensor.

    A value inside an ``If`` branch becomes an extra branch output (the other branch yields
    an empty tensor in its place), then an extra ``If`` output, up to the main graph; in a
    ``Loop`` body it becomes an extra scan output (stacked over iterations). ``Scan`` bodies
    are left alone. Main-graph inputs are not exposed: the caller has their values.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    wanted = set(tensors)
    names = model_names(out)
    mapping: dict[str, str] = {}
    exposed = _expose(out.graph, wanted, names, is_main=True)
    existing = {o.name for o in out.graph.output}
    for name, tensor in exposed:
        if name not in existing:
            out.graph.output.append(helper.make_empty_tensor_value_info(name))
            out.graph.output[-1].type.tensor_type.elem_type = TensorProto.FLOAT
        mapping[name] = tensor
    return out, mapping


def session_exposing(model: onnx.ModelProto, tensors: Sequence[str], *, optimize: bool = False, arena: bool = False
                     ) -> tuple[object, dict[str, str]]:
    """An ONNX Runtime session of ``model`` with ``tensors`` as extra outputs; output name → tensor.

    Without subgraphs the outputs are added to ``model`` itself while the session is made and
    taken off again, so ``model`` ends as it was (a copy would hold every weight once more).
    Values inside If/Loop bodies need rewiring, on a copy.
    """
    if any(has_subgraphs(n) for n in model.graph.node):
        exposed, mapping = expose_tensors(model, tensors)
        return ort.session(exposed, optimize=optimize, arena=arena), mapping
    keep = len(model.graph.output)
    existing = {o.name for o in model.graph.output}
    produced = {o for n in model.graph.node for o in n.output}
    mapping = {t: t for t in sorted(set(tensors) & produced)}  # the order expose_tensors gives
    try:
        for name in mapping:
            if name not in existing:
                model.graph.output.append(helper.make_empty_tensor_value_info(name))
                model.graph.output[-1].type.tensor_type.elem_type = TensorProto.FLOAT
        return ort.session(model, optimize=optimize, arena=arena), mapping
    finally:
        del model.graph.output[keep:]


def _expose(g: onnx.GraphProto, wanted: set[str], names: set[str], *, is_main: bool) -> list[tuple[str, str]]:
    here: list[tuple[str, str]] = []
    produced = {o for n in g.node for o in n.output}
    if not is_main:
        produced |= {i.name for i in g.input}
    for t in sorted(wanted & produced):
        here.append((t, t))
    for node in g.node:
        if node.op_type == "If":
            branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
            then_g, else_g = branches.get("then_branch"), branches.get("else_branch")
            if then_g is None or else_g is None:
                continue
            t_exp = _expose(then_g, wanted, names, is_main=False)
            e_exp = _expose(else_g, wanted, names, is_main=False)
            rows = [(t, True) for t in t_exp] + [(e, False) for e in e_exp]
            for (inner, tensor), in_then in rows:
                outer = fresh_name(f"{tensor}__calib", names)
                for branch, real in ((then_g, in_then), (else_g, not in_then)):
                    if real:
                        _add_output(branch, inner, names)
                    else:
                        empty = fresh_name(f"{tensor}__calib_empty", names)
                        branch.node.append(helper.make_node(
                            "Constant", [], [empty], name=fresh_name(empty + "_Constant", names),
                            value=numpy_helper.from_array(np.zeros(0, dtype=np.float32), empty)))
                        _add_output(branch, empty, names)
                node.output.append(outer)
                here.append((outer, tensor))
        elif node.op_type == "Loop":
            body = next((a.g for a in node.attribute if a.name == "body"), None)
            if body is None:
                continue
            for inner, tensor in _expose(body, wanted, names, is_main=False):
                _add_output(body, inner, names)
                outer = fresh_name(f"{tensor}__calib", names)
                node.output.append(outer)
                here.append((outer, tensor))
    return here


def _add_output(g: onnx.GraphProto, name: str, names: set[str]) -> None:
    """Append ``name`` as an extra output of subgraph ``g``.

    A value that already is an output of ``g`` goes through an Identity under a new
    name: a subgraph listing one name twice makes ONNX Runtime mis-wire the If/Loop
    outputs and change the model's result.
    """
    if any(o.name == name for o in g.output):
        alias = fresh_name(f"{name}__calib_alias", names)
        g.node.append(helper.make_node("Identity", [name], [alias], name=fresh_name(alias + "_Identity", names)))
        name = alias
    vi = helper.make_empty_tensor_value_info(name)
    vi.type.tensor_type.elem_type = TensorProto.FLOAT
    g.output.append(vi)
