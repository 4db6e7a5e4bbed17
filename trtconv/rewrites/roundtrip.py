"""Taking a model into onnx-graphsurgeon and back without losing what graphsurgeon drops
(model-level fields, opset versions, custom ops' output shapes), or failing after the work
on what it cannot write back."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from trtconv.errors import UnsupportedModelError
from trtconv.onnxutil.domains import ORT_DOMAINS, normalize_domain
from trtconv.onnxutil.walk import iter_graphs


def refuse_empty_list_attributes(model: onnx.ModelProto) -> None:
    """onnx-graphsurgeon cannot export an attribute that is an empty list (it infers the
    type from the first element): say so up front instead of failing after the work."""
    lists = (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS)
    for g in iter_graphs(model.graph):
        for node in g.node:
            for a in node.attribute:
                if a.type in lists and not (a.ints or a.floats or a.strings):
                    raise UnsupportedModelError(
                        f"node {node.name or node.op_type!r}: attribute {a.name!r} is an empty list, "
                        "which onnx-graphsurgeon cannot write back",
                        hint="remove the attribute from the model (an absent attribute means its default)",
                    )


def inferred(model: onnx.ModelProto, large: bool) -> onnx.ModelProto:
    """The model with ONNX's inferred shapes (as it is when large, or when inference fails on custom ops)."""
    if large:
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # custom ops: keep what is known
        return model


def export(graph: gs.Graph, like: onnx.ModelProto) -> onnx.ModelProto:
    """``graph`` as a model with ``like``'s model-level fields and opset versions."""
    out = gs.export_onnx(graph, do_type_check=False)
    copy_model_fields(like, out)
    return out


def sorted_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph in topological order and nothing else changed: the reference for unsorted inputs."""
    g = gs.import_onnx(model)
    g.toposort()
    return export(g, model)


def strip_value_info(model: onnx.ModelProto) -> None:
    """Drop inferred shapes we imported (they may be stale after edits) but keep those of
    custom-op outputs: no shape inference can recreate them."""
    for g in iter_graphs(model.graph):
        custom = {o for n in g.node if normalize_domain(n.domain) not in ORT_DOMAINS for o in n.output}
        keep = [vi for vi in g.value_info if vi.name in custom]
        del g.value_info[:]
        g.value_info.extend(keep)


def copy_model_fields(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    """graphsurgeon's export drops model-level fields; keep them (and the original opset versions)."""
    dst.ir_version = src.ir_version
    dst.producer_name = src.producer_name
    dst.producer_version = src.producer_version
    dst.domain = src.domain
    dst.model_version = src.model_version
    dst.doc_string = src.doc_string
    del dst.metadata_props[:]
    dst.metadata_props.extend(src.metadata_props)
    versions = {normalize_domain(o.domain): o.version for o in src.opset_import}
    have = {normalize_domain(o.domain) for o in dst.opset_import}
    for o in dst.opset_import:
        dom = normalize_domain(o.domain)
        if dom in versions:
            o.version = versions[dom]
    for dom, ver in sorted(versions.items()):
        if dom not in have:
            dst.opset_import.append(onnx.helper.make_opsetid(dom, ver))
