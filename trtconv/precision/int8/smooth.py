"""SmoothQuant-style migration: outlier channels moved from a LayerNorm's output into the weights that read it.

Transformer activations carry a few channels far larger than the rest (the LayerNorm's gamma makes
them); one per-tensor INT8 scale spends its levels on those and rounds every other channel to a
few levels. Per input channel ``j`` of the MatMuls/Gemms that read a LayerNormalization's output,
``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)``: the LayerNorm's gamma and beta are divided by
``s`` and each reader's weight row ``j`` multiplied by it, so ``(X / s) (s W) = X W`` exactly in
float and the activation's range flattens (the weights, quantized per output channel, take the
spread). Only LayerNorms whose output is read by MatMuls/Gemms alone are smoothed (post-LN BERT's
LayerNorm also feeds the residual Add: left alone). The smoothed tensors' scales are measured
again (X / s from the same runs); ``method="auto"`` tries each alpha and keeps smoothing only when
the whole model agrees better with FP32 on the held-out samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtconv.errors import InternalError
from trtconv.onnxutil import GraphView, cleanup, fresh_name, is_default_domain, model_names, tensor_array
from trtconv.precision.expose import session_exposing
from trtconv.precision.int8.accuracy import run_failure, with_origin
from trtconv.precision.int8.calibration import candidate_label
from trtconv.precision.int8.calibrators import (
    AUTO_CANDIDATES,
    Calibrator,
    CalibSettings,
    scale_from_threshold,
)
from trtconv.precision.int8.sensitivity import node_label

ALPHAS = (0.5, 0.75)
Key = tuple[str, str]  # (graph, LayerNormalization node)
_FLOOR = 1e-5  # channel maxima below this are treated as this (a dead channel keeps s finite)


@dataclass(frozen=True)
class _Reader:
    node: onnx.NodeProto
    slot: int  # the weight's input slot
    axis: int  # the weight's axis along the LayerNorm's channels


@dataclass(frozen=True)
class _Site:
    key: Key
    node: onnx.NodeProto
    output: str
    channels: int
    readers: tuple[_Reader, ...]


@dataclass(frozen=True)
class Smoothing:
    """What smoothing measured, and whether ``method="auto"`` kept it."""

    alpha: float
    factors: dict[Key, np.ndarray]  # per LayerNorm: s (its output divided by it, the readers' rows multiplied)
    scales: dict[str, float]  # the smoothed tensors' scales, measured again
    worst_cosine_without: float
    worst_cosine_with: float
    kept: bool
    tried: tuple[tuple[float, float], ...] = ()  # (alpha, worst cosine) of each alpha tried
    seconds: float = 0.0  # measuring it: the two passes over the samples and each alpha's held-out check
    passes: bool = False  # the smoothed model met the gate's thresholds on the held-out samples

    def stored(self) -> dict[str, object]:
        """What the cache sidecar keeps of a kept smoothing (float32 factors: exact through JSON)."""
        return {"alpha": self.alpha, "passes": self.passes, "worst_cosine_without": self.worst_cosine_without,
                "worst_cosine_with": self.worst_cosine_with, "scales": dict(sorted(self.scales.items())),
                "layers": [{"graph": g, "node": n, "s": v.astype(np.float32).tolist()}
                           for (g, n), v in sorted(self.factors.items())]}

    @classmethod
    def replayed(cls, stored: object) -> Smoothing | None:
        """A kept smoothing read back from ``stored`` (a cache hit replays it); None when absent."""
        if not isinstance(stored, dict):
            return None
        try:
            factors = {(str(e["graph"]), str(e["node"])): np.asarray(e["s"], np.float32) for e in stored["layers"]}
            return cls(float(stored["alpha"]), factors, {str(k): float(v) for k, v in stored["scales"].items()},
                       float(stored["worst_cosine_without"]), float(stored["worst_cosine_with"]), True,
                       passes=bool(stored.get("passes", False)))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def to_json(self) -> dict[str, object]:
        return {"kept": self.kept, "alpha": self.alpha, "layers": len(self.factors),
                "worst_cosine_without": float(f"{self.worst_cosine_without:.8f}"),
                "worst_cosine_with": float(f"{self.worst_cosine_with:.8f}"),
                "seconds": round(self.seconds, 3), "tried": [{"alpha": a, "worst_cosine": float(f"{c:.8f}")} for a, c in self.tried]}


def _constant(view: GraphView, name: str) -> onnx.TensorProto | None:
    """The constant behind ``name``, through ``Identity`` nodes (torch's exporter shares equal LayerNorm
    biases and tied weights that way)."""
    for _ in range(8):
        t = view.constant(name, overridable=False)
        site = view.producer(name)
        if t is not None or site is None or site.node.op_type != "Identity":
            return t
        name = site.node.input[0]
    return None


def _value(view: GraphView, name: str) -> np.ndarray:
    t = _constant(view, name)
    if t is None:
        raise InternalError(f"smoothing: {name!r} is not a constant")  # smoothable() found it one
    return np.asarray(tensor_array(t), np.float64)


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _reader(view: GraphView, node: onnx.NodeProto, x: str, channels: int) -> _Reader | None:
    """``node`` reading ``x`` as its activation, with a constant weight whose rows match the channels."""
    if node.op_type not in ("MatMul", "Gemm") or not is_default_domain(node.domain) or len(node.input) < 2:
        return None
    if node.input[0] != x or node.input[1] == x or (node.op_type == "Gemm" and _attr(node, "transA", 0)):
        return None
    w = _constant(view, node.input[1])
    if w is None or len(w.dims) != 2 or w.data_type != onnx.TensorProto.FLOAT:
        return None
    axis = 1 if node.op_type == "Gemm" and _attr(node, "transB", 0) else 0
    return _Reader(node, 1, axis) if w.dims[axis] == channels else None


def smoothable(model: onnx.ModelProto) -> list[_Site]:
    """The main graph's LayerNormalizations over the last axis whose output only MatMuls/Gemms read (as
    their activation, with a constant 2-D weight), with constant gamma (and beta)."""
    view = GraphView(model)
    returned = {o.name for o in model.graph.output}
    sites = []
    for node in model.graph.node:
        if node.op_type != "LayerNormalization" or not is_default_domain(node.domain) or len(node.input) < 2:
            continue
        gamma = _constant(view, node.input[1])
        beta = _constant(view, node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if gamma is None or len(gamma.dims) != 1 or gamma.data_type != onnx.TensorProto.FLOAT or (len(node.input) > 2 and node.input[2] and (
                beta is None or list(beta.dims) != list(gamma.dims))):
            continue
        if _attr(node, "axis", -1) != -1 or node.output[0] in returned:
            continue
        channels = int(gamma.dims[0])
        readers = [_reader(view, s.node, node.output[0], channels) for s in view.readers(node.output[0])]
        if readers and all(r is not None for r in readers):
            sites.append(_Site(("main", node_label(node)), node, node.output[0], channels,
                               tuple(r for r in readers if r is not None)))
    return sites


def _weight_max(view: GraphView, site: _Site) -> np.ndarray:
    """Per channel of ``site``: the largest |w| over every reader's weight row."""
    out = np.zeros(site.channels, np.float64)
    for r in site.readers:
        w = np.abs(_value(view, r.node.input[r.slot]))
        out = np.maximum(out, w.max(axis=1 - r.axis))
    return out


def smoothing_factors(model: onnx.ModelProto, xmax: Mapping[str, np.ndarray], alpha: float) -> dict[Key, np.ndarray]:
    """Per smoothable LayerNorm of ``model`` whose output's channel maxima ``xmax`` has: s for ``alpha``
    (the caller leaves out of ``xmax`` the LayerNorms whose readers stay in float: nothing to gain there)."""
    view = GraphView(model)
    out = {}
    for site in smoothable(model):
        x = xmax.get(site.output)
        if x is None or x.shape != (site.channels,):
            continue
        w = np.maximum(_weight_max(view, site), _FLOOR)
        s = np.maximum(x, _FLOOR) ** alpha / w ** (1.0 - alpha)
        if np.isfinite(s).all():
            out[site.key] = s.astype(np.float32)
    return out


def apply_smoothing(model: onnx.ModelProto, factors: Mapping[Key, np.ndarray]) -> int:
    """Divide each factored LayerNorm's gamma and beta by s and multiply its readers' weight rows by it
    (``model`` edited in place: a copy the caller owns; new initializers, so shared weights stay); returns
    how many LayerNorms took it."""
    view = GraphView(model)
    names = model_names(model)
    done = 0

    def put(value: np.ndarray, base: str) -> str:
        name = fresh_name(f"{base}_smoothed", names)
        model.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    for site in smoothable(model):
        s = factors.get(site.key)
        if s is None or s.shape != (site.channels,):
            continue
        s64 = s.astype(np.float64)
        for slot in (1, 2)[: len(site.node.input) - 1]:
            if site.node.input[slot]:
                v = _value(view, site.node.input[slot])
                site.node.input[slot] = put(v / s64, site.node.input[slot])
        for r in site.readers:
            w = _value(view, r.node.input[r.slot])
            r.node.input[r.slot] = put(w * (s64[:, None] if r.axis == 0 else s64[None, :]), r.node.input[r.slot])
        done += 1
    if done:
        cleanup(model)
    return done


def channel_maxima(model: onnx.ModelProto, samples: Iterable[Mapping[str, np.ndarray]],
                   among: set[str] | None = None) -> dict[str, np.ndarray]:
    """Per smoothable LayerNorm output of ``model`` (``among`` these tensors: the quantized activations): max
    |x| of each channel over ``samples`` (one session; none when there is nothing to smooth)."""
    tensors = sorted({s.output for s in smoothable(model) if among is None or s.output in among})
    if not tensors:
        return {}
    out: dict[str, np.ndarray] = {}
    for name, x in _activations(model, tensors, samples):
        m = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
        out[name] = np.maximum(out[name], m) if name in out and out[name].shape == m.shape else m
    return out


def _activations(model: onnx.ModelProto, tensors: Sequence[str], samples: Iterable[Mapping[str, np.ndarray]]):
    sess, mapping = session_exposing(model, tensors)
    fetch = list(mapping)
    for origin, sample in with_origin(samples, "calibration sample"):
        try:
            values = sess.run(fetch, dict(sample))
        except Exception as exc:
            raise run_failure(origin, exc) from exc
        for f, v in zip(fetch, values):
            x = np.asarray(v)
            if x.dtype == np.float32 and x.ndim >= 2 and x.size and np.isfinite(x).all():
                yield mapping[f], x


def smoothed_scales(model: onnx.ModelProto, per_alpha: Mapping[float, Mapping[Key, np.ndarray]], label: str,
                    samples: Iterable[Mapping[str, np.ndarray]]) -> dict[float, dict[str, float]]:
    """Per alpha: the smoothed tensors' scales by the chosen candidate ``label`` (entropy when it is none of
    ``AUTO_CANDIDATES``), measured on ``x / s`` from one more pass over ``samples`` (the smoothed model's
    LayerNorm output, exactly)."""
    outputs = {s.key: s.output for s in smoothable(model)}
    method, pct = next(((m, p) for m, p in AUTO_CANDIDATES if candidate_label(m, p) == label), ("entropy", None))
    cals = {a: Calibrator(CalibSettings(method="auto")) for a in per_alpha}
    by_tensor = {a: {outputs[k]: s for k, s in f.items() if k in outputs} for a, f in per_alpha.items()}
    tensors = sorted({t for f in by_tensor.values() for t in f})
    if tensors:
        for name, x in _activations(model, tensors, samples):
            for a, f in by_tensor.items():
                if name in f and x.shape[-1] == f[name].shape[0]:
                    cals[a].update(name, x / f[name])
    return {a: {t: scale_from_threshold(th) for t, th in cals[a].thresholds(method, pct).items()} for a in cals}

