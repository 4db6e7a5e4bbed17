"""Activation peaks: the largest finite magnitude each float tensor reaches on sample data.

FP16 overflows at 65504 and loses resolution long before; a tensor that gets big on
real inputs is the best predictor of an FP16 failure that weights alone cannot show.
ONNX Runtime returns only graph outputs, so values inside If/Loop bodies are routed out
as extra outputs by the INT8 stage's ``expose_tensors`` (the branch not taken yields an
empty tensor; a Loop stacks its iterations).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import onnx
from onnx import helper

from trtconv.onnxutil import iter_graphs
from trtconv.precision.expose import expose_tensors, session_exposing
from trtconv.precision.fp16_graph import graph_types
from trtconv.precision.fp16_rules import finite_peak
from trtconv.reference import ort

log = logging.getLogger(__name__)


def float_tensors(model: onnx.ModelProto) -> list[str]:
    """Names of float32 node outputs in every graph (types from inference), in graph order."""

    out: list[str] = []
    # subgraph outputs are left out: their values leave through the If/Loop outputs anyway, and
    # expose_tensors mis-wires an If when asked for a value that already is a branch output.
    # Their producers are still judged by their inputs.
    seen: set[str] = {o.name for g in list(iter_graphs(model.graph))[1:] for o in g.output}
    for g in iter_graphs(model.graph):
        types = graph_types(g)
        for node in g.node:
            for o in node.output:
                if o and o not in seen and types.get(o) == onnx.TensorProto.FLOAT:
                    seen.add(o)
                    out.append(o)
    return out


def _probe(model: onnx.ModelProto, names: list[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The model with ``names`` as extra outputs (subgraph values too); output name → tensor name."""

    try:
        return expose_tensors(model, names)
    except Exception as exc:  # never let observation break conversion: fall back to the main graph
        log.debug("cannot expose subgraph values (%s); measuring the main graph only", exc)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    main = {o for n in probe.graph.node for o in n.output}
    for n in names:
        if n in main and n not in existing:
            probe.graph.output.append(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    return probe, {n: n for n in names if n in main}


def activation_peaks(
    model: onnx.ModelProto,
    samples: Iterable[Mapping[str, np.ndarray]],
    *,
    progress: Callable[[int], None] | None = None,
    outputs: list[dict[str, np.ndarray]] | None = None,
) -> tuple[dict[str, float], int]:
    """(peak |x| per float tensor, in any graph, and per float input; number of samples run).

    ``outputs``: a list that receives each sample's model outputs, so a later accuracy check
    compares against them instead of running the FP32 model again.
    """
    names = float_tensors(model)
    if len(list(iter_graphs(model.graph))) == 1:
        sess, mapping = session_exposing(model, names)
    else:  # values inside If/Loop bodies need rewiring, on a copy
        probe, mapping = _probe(model, names)
        sess = ort.session(probe)
        del probe  # the session holds what it needs
    wanted = [o.name for o in sess.get_outputs()]
    own = [o.name for o in model.graph.output]
    peaks: dict[str, float] = {}
    count = 0
    for feeds in samples:
        count += 1
        for k, v in feeds.items():
            update_peak(peaks, k, np.asarray(v))
        values = ort.run(sess, feeds, wanted)
        for k, v in values.items():
            update_peak(peaks, mapping.get(k, k), v)
        if outputs is not None:
            outputs.append({k: values[k] for k in own if k in values})
        del values  # one sample's activations at a time
        if progress is not None:
            progress(count)
    return peaks, count


def update_peak(peaks: dict[str, float], name: str, value: np.ndarray) -> None:
    """Raise ``peaks[name]`` to the largest finite magnitude in ``value`` (float values only)."""
    if value.dtype.kind != "f" or value.size == 0:
        return
    m = finite_peak(value)
    if m > peaks.get(name, -1.0):
        peaks[name] = m
