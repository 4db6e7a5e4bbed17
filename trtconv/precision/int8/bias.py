"""Bias correction: the mean output shift INT8 adds to each Conv/Gemm/MatMul, taken back out of its bias.

Rounding and clipping the weights and inputs of a layer move the mean of each of its output
channels (a clipped ReLU tail always lowers it; a weight channel's rounding errors do not
cancel over a small fan-in). The per-layer shadows of :mod:`trtconv.precision.int8.sensitivity`
give both outputs of every quantized layer on real samples (its inputs quantized, everything
upstream FP32); the mean of ``int8 - fp32`` per output channel is that layer's own shift, and
subtracting it from the layer's bias (Conv bias, Gemm ``C`` divided by ``beta``, the constant
of the ``Add`` right after a MatMul; a Conv without bias gets one) removes it in expectation.
The bias stays a float input (TensorRT adds it in the INT8 kernel's float epilogue), so the
correction costs nothing at run time. ``method="auto"`` keeps it only when the whole model
agrees better with FP32 on the held-out samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtconv.onnxutil import GraphView, cleanup, fresh_name, model_names
from trtconv.precision.int8.qdq import Placement
from trtconv.precision.int8.sensitivity import node_label, probe_model, shadow_outputs

Key = tuple[str, str]  # (graph, node)
CORRECTABLE = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class BiasCorrection:
    """What bias correction measured, and whether ``method="auto"`` kept it."""

    shifts: dict[Key, np.ndarray]  # per layer: the mean INT8 - FP32 shift of each output channel
    worst_cosine_without: float
    worst_cosine_with: float
    kept: bool
    corrected: int  # layers whose bias could take the correction
    passes: bool | None = None  # the corrected model agreed with FP32 on the selection samples (None: not known)
    stopped: bool = False  # measured until it could not beat the uncorrected model: worst_cosine_with is a bound

    def stored(self) -> dict[str, object]:
        """What the cache sidecar keeps of a kept correction (float32 shifts: exact through JSON)."""
        return {"worst_cosine_without": self.worst_cosine_without, "worst_cosine_with": self.worst_cosine_with,
                "layers": [{"graph": g, "node": n, "shift": v.astype(np.float32).tolist()}
                           for (g, n), v in sorted(self.shifts.items())]}

    @classmethod
    def replayed(cls, stored: object, corrected: int) -> BiasCorrection | None:
        """A kept correction read back from ``stored`` (a cache hit replays it); None when absent."""
        if not isinstance(stored, dict):
            return None
        try:
            shifts = {(str(e["graph"]), str(e["node"])): np.asarray(e["shift"], np.float32)
                      for e in stored["layers"]}
            return cls(shifts, float(stored["worst_cosine_without"]), float(stored["worst_cosine_with"]), True,
                       corrected)
        except (KeyError, TypeError, ValueError):
            return None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kept": self.kept, "layers": self.corrected,
                                  "worst_cosine_without": float(f"{self.worst_cosine_without:.8f}"),
                                  "worst_cosine_with": float(f"{self.worst_cosine_with:.8f}")}
        if self.stopped:
            out["stopped_early"] = True
        return out


def _channel_axis(op: str) -> int:
    return 1 if op in ("Conv", "ConvTranspose") else -1


def bias_shifts(model: onnx.ModelProto, placed: Sequence[Placement], scales: Mapping[str, float],
                samples: Iterable[Mapping[str, np.ndarray]]) -> dict[Key, np.ndarray]:
    """Per quantized Conv/Gemm/MatMul of ``model`` (the prepared calibration form): the mean shift of each
    output channel its own quantization causes on ``samples`` (one ONNX Runtime session)."""
    placed = [p for p in placed if p.op_type in CORRECTABLE]
    if not placed:
        return {}
    probe, shadows = probe_model(model, placed, scales)
    return mean_shifts(probe, shadows, samples)


def mean_shifts(probe: onnx.ModelProto, shadows: Mapping[Key, tuple[str, str, str]],
                samples: Iterable[Mapping[str, np.ndarray]]) -> dict[Key, np.ndarray]:
    """Per shadowed layer (``probe_model``'s result), the mean of ``shadow - layer`` per output channel."""
    sums: dict[Key, np.ndarray] = {}
    counts: dict[Key, int] = {}
    for key, op, ref, got in shadow_outputs(probe, shadows, samples, "calibration sample"):
        if np.ndim(ref) < 2:
            continue
        d = np.moveaxis(np.asarray(got, np.float64) - np.asarray(ref, np.float64), _channel_axis(op), -1)
        d = d.reshape(-1, d.shape[-1])
        if not np.isfinite(d).all() or (key in sums and sums[key].shape != d.shape[1:]):
            continue
        sums[key] = sums.get(key, 0.0) + d.sum(axis=0)
        counts[key] = counts.get(key, 0) + d.shape[0]
    return {k: (sums[k] / counts[k]).astype(np.float32) for k in sums if counts[k]}


def apply_bias_shifts(model: onnx.ModelProto, shifts: Mapping[Key, np.ndarray], layers: set[Key], *,
                      dry_run: bool = False) -> int:
    """Subtract each shift of ``layers`` from that layer's bias in ``model`` (edited in place: a copy the
    caller owns); returns how many layers took it. A bias shared with another node gets a copy.
    ``dry_run``: only count them, ``model`` untouched."""
    view = GraphView(model)
    names = model_names(model)
    done = 0
    for path, g in view.graphs:
        for node in list(g.node):
            key = (path, node_label(node))
            shift = shifts.get(key)
            if shift is None or key not in layers:
                continue
            done += _correct(view, g, node, shift, names, dry_run)
    if done and not dry_run:
        cleanup(model)
    return done


def _correct(view: GraphView, g: onnx.GraphProto, node: onnx.NodeProto, shift: np.ndarray, names: set[str],
             dry_run: bool) -> int:
    """Fold ``-shift`` into ``node``'s bias; 0 where there is no constant bias of the right shape to fold it into."""
    n = shift.shape[0]
    if dry_run:
        node, g = _copy(node), onnx.GraphProto()  # every edit below lands on throwaway copies

    def put(value: np.ndarray, hint: str) -> str:
        name = fresh_name(f"{hint}_biascorrected", names)
        g.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        has = len(node.input) > 2 and bool(node.input[2])
        b = _constant(view, node.input[2]) if has else np.zeros(n, np.float32)
        if b is None or b.shape != (n,):
            return 0
        _set_bias(node, put(b - shift, node.input[2] if has else node_label(node)))
        return 1
    if op == "Gemm":
        beta = next((a.f for a in node.attribute if a.name == "beta"), 1.0)
        has = len(node.input) > 2 and bool(node.input[2])
        c = _constant(view, node.input[2]) if has else np.zeros(n, np.float32)
        if beta == 0 or c is None or c.size not in (1, n) or (c.ndim == 2 and c.shape[0] != 1) or c.ndim > 2:
            return 0
        value = np.broadcast_to(c.reshape(-1), (n,)) - shift / beta
        _set_bias(node, put(value.reshape((1, n) if c.ndim == 2 else (n,)), node.input[2] if has else node_label(node)))
        return 1
    readers = view.readers(node.output[0])  # MatMul: the constant of the Add right after it
    if len(readers) != 1 or readers[0].node.op_type != "Add" or view.uses(node.output[0]) != 1:
        return 0
    add = readers[0].node
    k = 1 if add.input[0] == node.output[0] else 0
    c = _constant(view, add.input[k])
    if c is None or c.shape != (n,):
        return 0
    name = put(c - shift, add.input[k])
    if not dry_run:
        add.input[k] = name
    return 1


def _set_bias(node: onnx.NodeProto, name: str) -> None:
    if len(node.input) > 2:
        node.input[2] = name
    else:
        node.input.append(name)


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def _constant(view: GraphView, name: str) -> np.ndarray | None:
    """The value behind ``name``, through ``Identity`` nodes (exporters share equal biases that way: torch's
    BERT has every zero-initialized bias behind one Identity each)."""
    for _ in range(8):
        value = view.value(name)
        site = view.producer(name)
        if value is not None or site is None or site.node.op_type != "Identity":
            return value
        name = site.node.input[0]
    return None
