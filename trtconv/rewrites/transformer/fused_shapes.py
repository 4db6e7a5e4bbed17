"""Shapes past the fused ops: ONNX's shape inference knows nothing of ``com.microsoft`` ops, so
every tensor after the first fused node would be shapeless (no proof data, no mask rank).
ONNX Runtime's own symbolic shape inference knows them; its value infos are added once,
before the graph is imported."""

from __future__ import annotations

from collections.abc import Collection

import onnx

from trtconv.onnxutil import normalize_domain


def with_fused_shapes(model: onnx.ModelProto, ops: Collection[tuple[str, str]], large: bool) -> onnx.ModelProto:
    """``model`` with value infos from ONNX Runtime's symbolic shape inference when a fused op's
    output has none (unchanged when large, when every such output has one, or when inference fails)."""
    if large:
        return model
    fused = [n for n in model.graph.node if (normalize_domain(n.domain), n.op_type) in ops]
    # a value info without a shape is not a shape: ONNX Runtime's float16 converter writes one with
    # only the new element type for every tensor it retypes (issue 33: every proof then lacked shapes)
    known = {vi.name for vi in (*model.graph.value_info, *model.graph.output) if _has_shape(vi)}
    if not fused or all(o in known for n in fused for o in n.output if o):
        return model
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        # the whole model: it reads small constants (Reshape shapes) and refuses stubbed tensors
        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)
    except Exception:  # an op it cannot handle: the rules work with what ONNX inference knows
        return model
    if inferred is None:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = known | {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    shapeless = [vi for vi in out.graph.value_info if not _has_shape(vi)]
    for vi in shapeless:
        out.graph.value_info.remove(vi)
    out.graph.value_info.extend(vi for vi in inferred.graph.value_info
                                if vi.name not in have and vi.type.tensor_type.elem_type)
    added = {vi.name for vi in out.graph.value_info}
    out.graph.value_info.extend(vi for vi in shapeless if vi.name not in added)  # the type, where no shape came
    return out


def _has_shape(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
