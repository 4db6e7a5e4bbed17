"""The whole-graph proof run where the change can reach (:mod:`.change_scope`'s plan): the
original's prefix once, then each side's region on the prefix's values.

Each part is a model of its own, written to a scratch folder with its weights in one data file
that all parts share: a weight both sides read is written once (the original's bytes, which the
rewritten model holds unchanged) and ONNX Runtime maps it from there. Nothing large is copied to
be compared with itself.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtconv.load import copy_fields, copy_lazy, inline_bytes, is_lazy, point_to_file, tensor_nbytes
from trtconv.reference import run, session
from trtconv.rewrites.change_scope import Scope, initializers

INLINE_BYTES = 1024  # smaller constants (shapes, scalars) stay in the part's own proto
DATA = "weights.data"


class Unscoped(Exception):
    """The plan does not hold on these inputs (a folded constant the original computes otherwise):
    the proof runs both whole graphs instead."""


class _Weights:
    """The parts' shared data file: each tensor written once, on first use."""

    def __init__(self, folder: Path) -> None:
        self.fh: BinaryIO = open(folder / DATA, "wb")  # noqa: SIM115 (closed by run_scoped)
        self.spans: dict[tuple[str, str], tuple[int, int]] = {}
        self.written = 0

    def place(self, key: tuple[str, str], t: onnx.TensorProto, out: onnx.TensorProto) -> None:
        if not is_lazy(t) and (t.data_type == onnx.TensorProto.STRING or t.data_location == onnx.TensorProto.EXTERNAL
                               or tensor_nbytes(t) < INLINE_BYTES):
            out.CopyFrom(t)
            return
        if key not in self.spans:
            offset = self.fh.tell()
            if is_lazy(t):
                length = copy_lazy(t, self.fh)
            else:
                raw = inline_bytes(t)
                self.fh.write(raw)
                length = len(raw)
                del raw
            self.spans[key] = (offset, length)
            self.written += length
        point_to_file(t, out, DATA, *self.spans[key])


def run_scoped(before: onnx.ModelProto, after: onnx.ModelProto, scope: Scope,
               feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """The compared outputs of the original and the rewritten region, and the weight bytes written.
    Raises :class:`Unscoped` when a folded constant is not what the original computes, and what
    ONNX Runtime raises when a part does not load or run (the whole-graph proof then says why)."""
    with tempfile.TemporaryDirectory(prefix="trtconv-proof-") as tmp:
        folder = Path(tmp)
        weights = _Weights(folder)
        try:
            values = dict(feeds)
            wanted = [x for x in (*scope.boundary, *scope.checks) if x not in values]
            if scope.prefix:
                part = _part(before, scope.prefix, values, wanted, weights, "b", frozenset())
                values.update(_run(part, folder / "prefix.onnx", weights, values))
            consts_a = initializers(after.graph)
            for name in scope.checks:
                _check(name, values[name], consts_a[name])
            ref: dict[str, np.ndarray] = {}
            if scope.outputs:
                ref = _run(_part(before, scope.region_before, values, scope.outputs, weights, "b", frozenset()),
                           folder / "before.onnx", weights, values)
            # every changed node loads and runs, even one that feeds only a cut (a plugin's inputs)
            ends = scope.outputs or _ends(after.graph, scope.region_after)
            got = _run(_part(after, scope.region_after, values, ends, weights, "a", scope.shared),
                       folder / "after.onnx", weights, values) if ends else {}
        finally:
            weights.fh.close()
        return ref, {k: v for k, v in got.items() if k in ref}, weights.written


def _ends(g: onnx.GraphProto, nodes: Sequence[int]) -> list[str]:
    """What ``nodes`` write that none of them reads: their part's outputs when none reaches the graph's."""
    read = {x for i in nodes for x in g.node[i].input}
    return [o for i in nodes for o in g.node[i].output if o and o not in read]


def _check(name: str, computed: np.ndarray, folded: onnx.TensorProto) -> None:
    value = numpy_helper.to_array(folded)
    if computed.dtype != value.dtype or computed.shape != value.shape or \
            not np.array_equal(computed, value, equal_nan=computed.dtype.kind in "fc"):
        raise Unscoped(f"folded constant {name!r} is not bit for bit what the original computes")


def _part(model: onnx.ModelProto, nodes: Sequence[int], values: Mapping[str, np.ndarray], outputs: Sequence[str],
          weights: _Weights, side: str, shared: frozenset[str]) -> onnx.ModelProto:
    """A model of ``model``'s ``nodes`` (in order), reading what they need of ``values`` as inputs and
    the constants they read as initializers (``shared`` ones under the original's key)."""
    g = model.graph
    part = onnx.ModelProto()
    copy_fields(model, part, frozenset({"graph", "functions"}))
    part.graph.name = g.name or "part"
    consts = initializers(g)
    produced: set[str] = set()
    read: list[str] = []
    for i in nodes:
        n = g.node[i]
        part.graph.node.add().CopyFrom(n)
        read.extend(x for x in n.input if x and x not in produced and x not in read)
        produced.update(n.output)
    for name in read:
        if name in consts:  # a folded constant too: the check made it the prefix's value, bit for bit
            weights.place(("b" if name in shared else side, name), consts[name], part.graph.initializer.add())
        elif name in values:
            v = values[name]
            part.graph.input.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    part.graph.output.extend(onnx.ValueInfoProto(name=o) for o in outputs)
    return part


def _run(part: onnx.ModelProto, path: Path, weights: _Weights, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    weights.fh.flush()
    path.write_bytes(part.SerializeToString())
    names = [i.name for i in part.graph.input]
    return run(session(path), {k: values[k] for k in names}, [o.name for o in part.graph.output])
