"""The form an INT8 candidate is measured in: what its graph computes from constants alone, computed once, not on
every run.

The accuracy check runs the candidate with ONNX Runtime's graph optimizations off (they change its numbers), so
each run dequantizes every weight again: on ddddocr's CRNN, with the FP16 remainder, a third of a run (its 8210 x
512 classifier alone). ``y = (x - zero_point) * scale`` of a constant is a constant; stored as one (in the scale's
type, computed as ONNX Runtime computes it: the integer difference in float32, times the scale, rounded once), the
outputs are bit for bit those of the model as written, which is what is deployed and what the gate judges.

The exact-rounding FP16 twin rounds each weight to FP16 and back (a Cast pair on a constant): on the same CRNN a
quarter of a twin's run, the classifier's 8.4 M values twice. :func:`measured_form` computes those Casts of
constants once (float32 <-> float16 only: numpy's casts round to nearest even as ONNX Runtime's do, the same bits)
and *feeds* their values as graph inputs: stored as initializers they would be constants to ONNX Runtime, which
prepacks a constant GEMM or LSTM weight and sums in another order (other bits); an input, like the Cast's output
it replaces, is not prepacked, so every kernel runs as in the model as written.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtconv.onnxutil import dequantized, is_lazy, iter_graphs

_INTEGERS = (TensorProto.INT8, TensorProto.UINT8)
_SCALES = (TensorProto.FLOAT, TensorProto.FLOAT16)


def weights_dequantized(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose DequantizeLinear nodes of constant 8-bit tensors are their outputs, stored
    (``model`` itself when there are none). Weights left on disk, blocked quantization and other types stay."""
    if not any(_foldable(n, {t.name: t for t in g.initializer}, set()) for g in iter_graphs(model.graph)
               for n in g.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    folded: set[str] = set()  # the folded nodes' inputs
    for g in iter_graphs(out.graph):
        inits = {t.name: t for t in g.initializer}
        outputs = {o.name for o in g.output}
        gone = [i for i, node in enumerate(g.node) if _foldable(node, inits, outputs)]
        values = [(g.node[i].output[0], _dequantized(g.node[i], inits)) for i in gone]
        for i in reversed(gone):  # by index, in place: re-adding the rest would copy every weight
            folded.update(g.node[i].input)
            del g.node[i]
        for name, value in values:  # made in place: numpy_helper.from_array's tensor, without a copy to extend by
            t = g.initializer.add()
            t.name, t.data_type, t.raw_data = name, helper.np_dtype_to_tensor_dtype(value.dtype), value.tobytes()
            t.dims.extend(value.shape)
    _drop_unused(out, folded)
    return out


def measured_form(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """(the model to open a session of, the inputs to add to every sample's): :func:`weights_dequantized`, and
    the main graph's Casts of constants (float32 <-> float16, chains included) computed once and fed (see above)."""
    folded = weights_dequantized(model)
    g = folded.graph
    overridable = {i.name for i in g.input}  # an initializer listed as an input is a default, not a constant
    values = {t.name: t for t in g.initializer if not is_lazy(t) and t.data_type in _CASTS and t.name not in overridable}
    outputs = {o.name for o in g.output}
    computed: dict[str, np.ndarray] = {}
    gone: list[int] = []
    for i, node in enumerate(g.node):
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        src = node.input[0] if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and node.input else ""
        if to in _CASTS and (src in values or src in computed) and node.output[0] not in outputs:
            x = computed[src] if src in computed else numpy_helper.to_array(values[src])
            with np.errstate(over="ignore"):  # beyond FP16's range is infinity, in ONNX Runtime's Cast too
                computed[node.output[0]] = x.astype(helper.tensor_dtype_to_np_dtype(to))
            gone.append(i)
    if not gone:
        return folded, {}
    if folded is model:  # weights_dequantized found nothing to fold: the copy is made here
        folded = onnx.ModelProto()
        folded.CopyFrom(model)
        g = folded.graph
    sources = {i for k in gone for i in g.node[k].input}
    for k in reversed(gone):
        del g.node[k]
    read = _read_names(folded)
    feeds = {name: v for name, v in computed.items() if name in read}
    for i in reversed(range(len(g.value_info))):
        if g.value_info[i].name in feeds:
            del g.value_info[i]
    for name, v in feeds.items():
        g.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    _drop_unused(folded, sources)
    return folded, feeds


_CASTS = (TensorProto.FLOAT, TensorProto.FLOAT16)


def _read_names(model: onnx.ModelProto) -> set[str]:
    """Every name a node of any graph reads, and every graph's outputs."""
    read: set[str] = set()
    for g in iter_graphs(model.graph):
        for n in g.node:
            read.update(n.input)
        read.update(o.name for o in g.output)
    return read


def _foldable(node: onnx.NodeProto, inits: dict[str, TensorProto], outputs: set[str]) -> bool:
    if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or node.output[0] in outputs:
        return False
    if any(a.name == "block_size" and a.i for a in node.attribute):
        return False
    names = [i for i in node.input if i]
    if len(names) < 2 or not all(n in inits and not is_lazy(inits[n]) for n in names):
        return False
    return inits[names[0]].data_type in _INTEGERS and inits[names[1]].data_type in _SCALES


def _dequantized(node: onnx.NodeProto, inits: dict[str, TensorProto]) -> np.ndarray:
    scale = numpy_helper.to_array(inits[node.input[1]])
    zero = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    y = dequantized(numpy_helper.to_array(inits[node.input[0]]), scale, zero, axis)
    return y.astype(scale.dtype.newbyteorder("<"), copy=False)  # little-endian, as TensorProto stores raw data


def _drop_unused(model: onnx.ModelProto, folded: set[str]) -> None:
    """The folded nodes' integer weights, scales and zero points that nothing reads any more."""
    used: Counter[str] = Counter()
    for g in iter_graphs(model.graph):
        for n in g.node:
            used.update(n.input)
        used.update(o.name for o in g.output)
        used.update(i.name for i in g.input)
    for g in iter_graphs(model.graph):
        for i in reversed(range(len(g.initializer))):
            if g.initializer[i].name in folded and not used[g.initializer[i].name]:
                del g.initializer[i]
