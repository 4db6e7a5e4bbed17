"""Which quantized layers hurt: the error each one adds, and the fewest to keep out of INT8.

**Per-layer error** (in the spirit of ONNX Runtime's ``qdq_loss_debug``): every quantized
layer gets a *shadow* — a copy of the node that reads its inputs through the layer's own
Q/DQ pairs while the rest of the network stays FP32 — and one ONNX Runtime session over
the held-out samples returns both outputs of every layer. The normalized squared error
``||int8 - fp32||² / ||fp32||²`` of a layer's output is the error that layer alone adds,
measured on real activations in one pass, whatever the number of layers.

**Auto-exclude** ranks layers by that error and finds the shortest prefix of the ranking
whose exclusion lets the whole model pass the gate (doubling, then bisection), then
drops from it any layer the gate does not need. Each check reuses the calibrated scales:
only the model is rebuilt and the accuracy run again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from trtconv.onnxutil import GraphView, fresh_name, has_lazy_weights, iter_graphs_with_path, model_names
from trtconv.precision.expose import session_exposing
from trtconv.precision.int8.accuracy import run_failure, with_origin
from trtconv.precision.int8.qdq import Placement, insert_qdq
from trtconv.reference import dot

PROBE_SUFFIX = "__int8probe"


@dataclass(frozen=True)
class LayerError:
    """The error one quantized layer adds to its own output (everything else FP32)."""

    graph: str
    node: str
    op_type: str
    nmse: float  # ||int8 - fp32||^2 / ||fp32||^2 over the held-out samples
    cosine: float

    @property
    def key(self) -> tuple[str, str]:
        return self.graph, self.node

    def to_json(self) -> dict[str, object]:
        return {"graph": self.graph, "node": self.node, "op_type": self.op_type,
                "nmse": float(f"{self.nmse:.6g}"), "cosine": float(f"{self.cosine:.8f}")}


def node_label(node: onnx.NodeProto) -> str:
    """How placements name a node (its name, or op type and outputs when unnamed)."""
    return node.name or f"{node.op_type}({', '.join(node.output)})"


def probe_model(model: onnx.ModelProto, placed: Sequence[Placement], scales: Mapping[str, float]
                 ) -> tuple[onnx.ModelProto, dict[tuple[str, str], tuple[str, str, str]]]:
    """A new model: ``model`` plus one shadow per quantized layer; (graph, node) -> (op, fp32 output, int8 output).

    The shadows are lent to ``model`` (appended to their graphs, after every node they read)
    while ``insert_qdq`` makes its copy, then taken off again: a copy of ``model`` to add them
    to would hold every weight once more.
    """
    layers = {(p.graph, p.node) for p in placed}
    taken = model_names(model)
    shadows: dict[tuple[str, str], tuple[str, str, str]] = {}
    renamed: dict[tuple[str, str], str] = {}
    lent: list[tuple[onnx.GraphProto, int]] = []
    try:
        for path, g in list(iter_graphs_with_path(model.graph)):
            twins: list[onnx.NodeProto] = []
            for node in g.node:
                label = node_label(node)
                if (path, label) not in layers or not node.output or not node.output[0]:
                    continue
                twin = onnx.NodeProto()
                twin.CopyFrom(node)
                twin.name = fresh_name(label + PROBE_SUFFIX, taken)
                for k, o in enumerate(node.output):
                    if o:
                        twin.output[k] = fresh_name(o + PROBE_SUFFIX, taken)
                twins.append(twin)
                renamed[(path, label)] = twin.name
                shadows[(path, label)] = (node.op_type, node.output[0], twin.output[0])
            lent.append((g, len(g.node)))
            g.node.extend(twins)
        moved = [replace(p, node=renamed[(p.graph, p.node)]) for p in placed if (p.graph, p.node) in renamed]
        return insert_qdq(model, moved, scales), shadows
    finally:
        for g, keep in lent:
            del g.node[keep:]


def layer_errors(
    model: onnx.ModelProto,
    placed: Sequence[Placement],
    scales: Mapping[str, float],
    samples: Iterable[Mapping[str, np.ndarray]],
) -> tuple[LayerError, ...]:
    """Every quantized layer's own error on ``samples``, worst first (``model``: the FP32 model Q/DQ went into).

    Weights left on disk (a large model): the shadows go in ``ON_DISK_GROUPS`` groups of about
    equal weight, one session each over every sample (re-iterable samples), so that a session
    maps the INT8 copies of a fraction of the weights, not all. Each shadow reads only FP32
    values, so its error is the same whichever group it is in.
    """
    if not placed:
        return ()
    acc: dict[tuple[str, str], np.ndarray] = {}
    ops: dict[tuple[str, str], str] = {}
    for group in _groups(model, placed, split=iter(samples) is not samples):
        _accumulate(model, group, scales, samples, acc, ops)
    out = []
    for (graph, node), (rg, rr, gg, dd) in acc.items():
        if rr == 0 and gg == 0:
            continue  # never ran (a branch the samples do not take)
        cos = float(np.clip(rg / np.sqrt(rr * gg), -1, 1)) if rr > 0 and gg > 0 else 0.0
        out.append(LayerError(graph, node, ops[(graph, node)], float(dd / rr) if rr > 0 else float("inf"), cos))
    return tuple(sorted(out, key=lambda e: (-e.nmse, e.graph, e.node)))


ON_DISK_GROUPS = 4


def _groups(model: onnx.ModelProto, placed: Sequence[Placement], *, split: bool) -> list[list[Placement]]:
    """The placements in groups of whole layers: one group, or ``ON_DISK_GROUPS`` of about equal
    weight bytes when the weights are on disk (and ``split``: the samples can be read again)."""
    if not split or not has_lazy_weights(model):
        return [list(placed)]
    view = GraphView(model)
    layers: dict[tuple[str, str], list[Placement]] = {}
    for p in placed:
        layers.setdefault((p.graph, p.node), []).append(p)

    def size(ps: list[Placement]) -> int:
        ts = [view.constant(p.tensor) for p in ps if p.kind == "weight"]
        return sum(int(np.prod(t.dims, dtype=np.int64)) for t in ts if t is not None)

    total = sum(size(ps) for ps in layers.values()) or 1
    groups: list[list[Placement]] = [[]]
    filled = 0
    for ps in layers.values():
        if groups[-1] and filled >= total * len(groups) / ON_DISK_GROUPS:
            groups.append([])
        groups[-1].extend(ps)
        filled += size(ps)
    return groups


def shadow_outputs(probe: onnx.ModelProto, shadows: Mapping[tuple[str, str], tuple[str, str, str]],
                   samples: Iterable[Mapping[str, np.ndarray]], what: str
                   ) -> Iterator[tuple[tuple[str, str], str, np.ndarray, np.ndarray]]:
    """Per sample, each shadowed layer's (key, op, FP32 output, INT8 output), non-empty and of one shape, from
    one ONNX Runtime session over ``probe`` (``probe_model``'s result). The session holds what it needs:
    callers drop their ``probe`` once this is made."""
    wanted = sorted({t for _, a, b in shadows.values() for t in (a, b)})
    sess, mapping = session_exposing(probe, wanted)
    del probe
    fetch = list(mapping)
    for origin, sample in with_origin(samples, what):
        try:
            values = dict(zip((mapping[f] for f in fetch), sess.run(fetch, dict(sample))))
        except Exception as exc:
            raise run_failure(origin, exc) from exc
        for key, (op, ref_name, got_name) in shadows.items():
            ref, got = values.get(ref_name), values.get(got_name)
            if ref is not None and got is not None and np.size(ref) and np.shape(ref) == np.shape(got):
                yield key, op, ref, got
        del values


def _accumulate(model: onnx.ModelProto, placed: Sequence[Placement], scales: Mapping[str, float],
                samples: Iterable[Mapping[str, np.ndarray]], acc: dict[tuple[str, str], np.ndarray],
                ops: dict[tuple[str, str], str]) -> None:
    """One session with the shadows of ``placed``, over every sample: into ``acc``, per layer,
    (dot, |ref|^2, |got|^2, |diff|^2)."""
    probe, shadows = probe_model(model, placed, scales)
    rows = shadow_outputs(probe, shadows, samples, "accuracy sample")
    del probe
    for key, (op, _, _) in shadows.items():
        acc[key] = np.zeros(4)
        ops[key] = op
    for key, _, ref, got in rows:
        r = np.asarray(ref, dtype=np.float64).ravel()
        q = np.asarray(got, dtype=np.float64).ravel()
        ok = np.isfinite(r) & np.isfinite(q)
        r, q = r[ok], q[ok]
        d = r - q
        acc[key] += (dot(r, q), dot(r, r), dot(q, q), dot(d, d))


def sensitivity_sessions(model: onnx.ModelProto, placed: Sequence[Placement],
                         samples: Iterable[Mapping[str, np.ndarray]]) -> int:
    """How many ONNX Runtime sessions (each one pass over the samples) ``layer_errors`` runs."""
    return len(_groups(model, placed, split=iter(samples) is not samples)) if placed else 0


def fewest_exclusions(
    ranking: Sequence[tuple[str, str]],
    passes: Callable[[frozenset[tuple[str, str]]], bool],
    *,
    prune_up_to: int = 8,
    limit: int | None = None,
) -> tuple[tuple[str, str], ...] | None:
    """The smallest set of layers (from the front of ``ranking``) whose exclusion ``passes``; None if none.

    Doubling then bisection over prefixes of the ranking (``passes`` is called O(log n)
    times), then each layer of a short answer is tried without: the gate, not the
    ranking, has the last word. ``limit``: no prefix longer than this is tried, and the
    longest allowed one is tried first, so an unreachable goal costs one check (none at 0).
    """
    if not ranking:
        return None
    n = len(ranking)
    if limit is not None and limit < n:
        if limit <= 0 or not passes(frozenset(ranking[:limit])):
            return None
        n = limit
    good, bad = None, 0
    k = 1
    while True:
        k = min(k, n)
        if passes(frozenset(ranking[:k])):
            good = k
            break
        bad = k
        if k == n:
            return None
        k *= 2
    while good - bad > 1:
        mid = (good + bad) // 2
        if passes(frozenset(ranking[:mid])):
            good = mid
        else:
            bad = mid
    chosen = list(ranking[:good])
    if len(chosen) <= prune_up_to:
        for layer in list(chosen):
            if len(chosen) > 1 and passes(frozenset(c for c in chosen if c != layer)):
                chosen.remove(layer)
    return tuple(chosen)
