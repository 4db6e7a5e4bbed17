"""Taking a model into onnx-graphsurgeon and back without losing what graphsurgeon drops
(model-level fields, opset versions, custom ops' output shapes), or failing after the work
on what it cannot write back."""

from __future__ import annotations

import contextlib
import sys

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from trtconv.errors import UnsupportedModelError
from trtconv.load import (
    DATA_FIELDS,
    copy_fields,
    ensure_room,
    inferred_value_info,
    is_lazy,
    structure_only,
    tensor_array,
    tensor_nbytes,
)
from trtconv.onnxutil import ORT_DOMAINS, iter_graphs, normalize_domain


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
    """``model``'s structure with ONNX's inferred value infos and output types, its large
    tensors stripped (``structure_only``): shapes are all callers need, and inference on the
    whole model would copy every weight several times over. As it is when large, or when
    inference fails on custom ops."""
    stub = structure_only(model)
    if large:
        return stub
    value_info, outputs = inferred_value_info(stub)
    stub.graph.value_info.extend(value_info)
    del stub.graph.output[:]
    stub.graph.output.extend(outputs)
    return stub


def import_with_shapes(model: onnx.ModelProto, shaped: onnx.ModelProto) -> gs.Graph:
    """graphsurgeon's graph of ``model`` with the value infos and output types of ``shaped``
    (it folds Shape nodes only where shapes are known). They are lent to ``model`` for the
    import and taken back, so ``model`` is neither copied nor changed."""
    keep = len(model.graph.value_info)
    outputs = [onnx.ValueInfoProto() for _ in model.graph.output]
    for o, src in zip(outputs, model.graph.output):
        o.CopyFrom(src)
    model.graph.value_info.extend(shaped.graph.value_info)
    del model.graph.output[:]
    model.graph.output.extend(shaped.graph.output)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # its warnings (a bfloat16 tensor) print: never into --json
            graph = gs.import_onnx(model)
    finally:
        del model.graph.value_info[keep:]
        del model.graph.output[:]
        model.graph.output.extend(outputs)
    for t in graph.tensors().values():
        values = getattr(t, "_values", None)
        if isinstance(values, LazyValues) and isinstance(values.tensor, onnx.TensorProto) and is_lazy(values.tensor):
            t._values = _OnDisk(values.tensor)
    return graph


def load_foldable(graph: gs.Graph) -> int:
    """Read into memory the on-disk constants that constant folding would evaluate (those
    feeding a node whose inputs are all constant, directly or through such nodes): ONNX
    Runtime, which graphsurgeon folds with, refuses absolute data paths. Others stay on disk.
    Returns how many were read."""
    known: set[str] = {t.name for t in graph.tensors().values() if isinstance(t, gs.Constant)}
    feeding: list[gs.Constant] = []
    for node in graph.nodes:  # sorted: producers first
        ins = [t for t in node.inputs if t.name]
        if node.op != "Constant" and ins and all(t.name in known for t in ins):
            known.update(o.name for o in node.outputs)
            feeding.extend(t for t in ins if isinstance(t, gs.Constant) and isinstance(t._values, _OnDisk))
    for t in feeding:
        if isinstance(t._values, _OnDisk):
            t.values = t._values.load()
    return len(feeding)


class _OnDisk(LazyValues):
    """graphsurgeon's lazy values of a tensor left on disk (``load_model(lazy_from=...)``):
    read from its file when a rule asks; exported as the same on-disk reference otherwise."""

    def load(self) -> np.ndarray:
        return tensor_array(self.tensor)


# Imported tensors at least this large are lent to the export as byte-less stand-ins.
EXPORT_STUB_BYTES = 1 << 20


SUBBYTE = frozenset({np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)})


def repack_subbyte(graph: gs.Graph) -> None:
    """Give 4-bit constants (int4 weights of a rewrite) back as packed TensorProtos: reading a
    constant's values unpacks it to one byte per value, which graphsurgeon's export would then
    write as if packed (a size mismatch)."""
    for t in graph.tensors().values():
        values = getattr(t, "_values", None)
        if isinstance(t, gs.Constant) and isinstance(values, np.ndarray) and values.dtype in SUBBYTE:
            t._values = LazyValues(onnx.numpy_helper.from_array(values, t.name))


def export(graph: gs.Graph, like: onnx.ModelProto, *, with_weights: bool = True) -> onnx.ModelProto:
    """``graph`` as a model with ``like``'s model-level fields and opset versions.

    ``gs.export_onnx`` alone holds each weight twice more (``make_graph`` copies it into a
    GraphProto, ``make_model`` that into the ModelProto). The imported (lazy) weights are
    swapped for byte-less stand-ins for the export, and their bytes then copied once into the
    model's initializers (left out with ``with_weights=False``, when only the structure is wanted).
    """
    lent: dict[str, onnx.TensorProto] = {}
    swapped = []
    repack_subbyte(graph)
    for t in graph.tensors().values():
        values = getattr(t, "_values", None)
        if isinstance(t, gs.Constant) and isinstance(values, LazyValues) \
                and isinstance(values.tensor, onnx.TensorProto) and tensor_nbytes(values.tensor) >= EXPORT_STUB_BYTES:
            real = values.tensor
            stub = onnx.TensorProto()
            copy_fields(real, stub, DATA_FIELDS)
            values.tensor = stub
            swapped.append((values, real))
            lent[t.name] = real
    try:
        out = gs.export_onnx(graph, do_type_check=False)
    finally:
        for values, real in swapped:
            values.tensor = real
    if with_weights:
        ensure_room(sum(tensor_nbytes(t) for t in lent.values()), "writing the rewritten graph's weights")
        for init in out.graph.initializer:
            source = lent.get(init.name)
            if source is not None:
                name = init.name
                init.CopyFrom(source)
                init.name = name
    copy_model_fields(like, out)
    keep_declared_output_shapes(like, out)
    return out


def kept_weights(graph: gs.Graph) -> dict[str, onnx.TensorProto]:
    """The graph's constants still holding the imported tensor they came from (no rule or clean-up
    read or replaced their values), by name: :func:`export` writes exactly those bytes, so the
    graph proof knows them the same as the original's without comparing a byte."""
    out: dict[str, onnx.TensorProto] = {}
    for t in graph.tensors().values():
        values = getattr(t, "_values", None)
        if isinstance(t, gs.Constant) and isinstance(values, LazyValues) and isinstance(values.tensor, onnx.TensorProto) \
                and values.tensor.name == t.name:
            out[t.name] = values.tensor
    return out


def keep_declared_output_shapes(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    """An output graphsurgeon exports without a shape (inference could not follow it, e.g. past
    ConvInteger) keeps the shape ``src`` declared for it, when its name and type are unchanged:
    onnx.checker refuses a graph output without a shape."""
    declared = {o.name: o.type.tensor_type for o in src.graph.output if o.type.HasField("tensor_type")}
    for o in dst.graph.output:
        before = declared.get(o.name)
        tt = o.type.tensor_type
        if (before is not None and before.HasField("shape") and o.type.HasField("tensor_type")
                and not tt.HasField("shape") and tt.elem_type == before.elem_type):
            tt.shape.CopyFrom(before.shape)


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
    inputs = {i.name for i in dst.graph.input}
    if src.ir_version < 4 and any(t.name not in inputs for t in dst.graph.initializer):
        dst.ir_version = 4  # IR 3 wants every initializer a graph input; the export lists none (IR 4 allows it)
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
