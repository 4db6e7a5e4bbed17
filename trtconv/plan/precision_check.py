"""Did the engine reach the precision that was asked for? A pure function over inspector JSON.

TensorRT 11 has no FP16/INT8 builder flags: precision comes from the ONNX, and a graph
whose casts or Q/DQ nodes TensorRT cannot use still builds, silently in FP32. So after
every build we read the engine inspector's layer information (built with DETAILED
profiling verbosity) and count, per compute layer, the data type it runs in.

Schema (both major versions): ``{"Layers": [layer, ...], ...}``, each layer a dict with
``Name``, ``LayerType`` and ``Inputs``/``Outputs`` lists of tensors. A tensor carries its
type as ``"Format/Datatype": "Row major linear FP16 format"`` (10.x) or as a separate
``"DataType": "Half"`` next to ``"Format"`` (11.x). With LAYER_NAMES_ONLY verbosity
``Layers`` is a list of strings, which carries no types: that is reported, not guessed.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import onnx

from trtconv.errors import InternalError, PrecisionNotAchievedError
from trtconv.onnxutil import iter_graphs

log = logging.getLogger(__name__)

# Layer types that move or reshape data but compute nothing: their dtype says nothing
# about the precision the model runs in.
NON_COMPUTE = frozenset({
    "Reformat", "Shuffle", "NoOp", "Constant", "Shape", "Slice", "Concatenation", "Gather",
    "Identity", "Cast", "Squeeze", "Unsqueeze", "Assertion", "Quantize", "Dequantize",
})
# Layers TensorRT compiled as one fused subgraph (Myelin "ForeignNode"): the inspector shows only
# their boundary tensors, which stay FP32 when the ONNX keeps FP32 inputs/outputs even though the
# inside runs in FP16. Their types say nothing either way, so they are counted apart.
OPAQUE = frozenset({"Myelin"})
DTYPE_WORDS = [  # (regex on the tensor's type text, our dtype name), first match wins
    (r"\bfp32\b|\bfloat\b|\bfloat32\b|\bkfloat\b", "fp32"),
    (r"\bfp16\b|\bhalf\b|\bkhalf\b", "fp16"),
    (r"\bbf16\b|\bbfloat16\b", "bf16"),
    (r"\bint8\b|\bkint8\b", "int8"),
    (r"\bfp8\b", "fp8"),
    (r"\bint4\b", "int4"),
    (r"\bfp4\b", "fp4"),
    (r"\bint32\b", "int32"),
    (r"\bint64\b", "int64"),
    (r"\bbool\b", "bool"),
    (r"\buint8\b", "uint8"),
]
FLOAT_TYPES = ("fp32", "fp16", "bf16", "int8", "fp8", "int4", "fp4")
# What counts as "reduced" for each request; the order is by how narrow the type is.
REDUCED = {"fp16": {"fp16", "bf16", "int8", "fp8", "int4", "fp4"}, "int8": {"int8", "fp8", "int4", "fp4"}}


@dataclass(frozen=True)
class PrecisionSummary:
    """How many compute layers run in each data type (the narrowest float type they touch)."""

    layers_total: int
    compute_layers: int
    by_dtype: tuple[tuple[str, int], ...]  # transparent compute layers only
    detailed: bool  # False: the inspector gave names only
    opaque_layers: int = 0  # fused subgraphs whose inside precision the inspector does not show

    def count(self, *dtypes: str) -> int:
        d = dict(self.by_dtype)
        return sum(d.get(t, 0) for t in dtypes)

    def share(self, dtypes: set[str] | frozenset[str]) -> float:
        typed = sum(n for t, n in self.by_dtype)
        return self.count(*dtypes) / typed if typed else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "layers_total": self.layers_total,
            "compute_layers": self.compute_layers,
            "by_dtype": dict(self.by_dtype),
            "detailed": self.detailed,
            "opaque_layers": self.opaque_layers,
        }


def tensor_dtype(tensor: dict[str, Any]) -> str | None:
    """A layer tensor's data type from either schema; None if it names none we know."""
    text = tensor.get("DataType") or tensor.get("Format/Datatype") or tensor.get("Format") or ""
    text = str(text).lower()
    for pattern, name in DTYPE_WORDS:
        if re.search(pattern, text):
            return name
    return None


def layer_dtype(layer: dict[str, Any]) -> str | None:
    """The narrowest float type among a layer's inputs and outputs (an INT8 conv with an FP32
    output still computes in INT8); integer/bool-only layers return None."""
    types = [tensor_dtype(t) for t in list(layer.get("Inputs") or []) + list(layer.get("Outputs") or [])
             if isinstance(t, dict)]
    floats = [t for t in types if t in FLOAT_TYPES]
    if not floats:
        return None
    return max(floats, key=FLOAT_TYPES.index)


def summarize_inspector(info: str | dict[str, Any]) -> PrecisionSummary:
    """Count compute layers per dtype in ``IEngineInspector.get_engine_information(JSON)`` output."""
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except json.JSONDecodeError as exc:
            raise InternalError(f"engine inspector returned invalid JSON: {exc}") from exc
    if not isinstance(info, dict):
        raise InternalError("engine inspector JSON is not an object")
    layers = info.get("Layers") or []
    counts: Counter[str] = Counter()
    compute = opaque = 0
    detailed = any(isinstance(layer, dict) for layer in layers)
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        if str(layer.get("LayerType", "")) in NON_COMPUTE:
            continue
        compute += 1
        if str(layer.get("LayerType", "")) in OPAQUE or "ForeignNode" in str(layer.get("Name", "")):
            opaque += 1
            continue
        dt = layer_dtype(layer)
        if dt is not None:
            counts[dt] += 1
    return PrecisionSummary(
        layers_total=len(layers),
        compute_layers=compute,
        by_dtype=tuple(sorted(counts.items())),
        detailed=detailed,
        opaque_layers=opaque,
    )


# Where a network's multiply-accumulates are: what fp16/int8 is for. In a built engine TensorRT fuses
# the pointwise layers around them (an INT8 convolution absorbs its bias, scale and activation), so
# the engine inspector shows few of those; a *network* still lists each one, in FP32 around Q/DQ.
# Layer types as ``network_layer_info`` spells them (TensorRT's LayerType names, title case).
MAC_LAYERS = frozenset({"Convolution", "Deconvolution", "Matrix_Multiply", "Einsum"})


def summarize_network(info: dict[str, Any]) -> PrecisionSummary:
    """Count the strongly typed network's multiply-accumulate layers per dtype (all compute layers if
    it has none): the achieved precision where the engine itself cannot be inspected (TensorRT-RTX
    without an RTX GPU). Same schema as the inspector's; a strongly typed build must follow it."""
    layers = [layer for layer in info.get("Layers") or [] if isinstance(layer, dict)]
    mac = [layer for layer in layers if str(layer.get("LayerType", "")) in MAC_LAYERS]
    return summarize_inspector({"Layers": mac or layers})


def onnx_has_reduced_precision(model: Any, requested: str) -> bool:
    """Whether the (prepared) ONNX itself asks for ``requested``: FP16 tensors or Casts to FP16
    for fp16, QuantizeLinear to INT8 for int8. Weights need not be loaded."""


    half = onnx.TensorProto.FLOAT16
    for g in iter_graphs(model.graph):
        for node in g.node:
            if requested == "int8" and node.op_type == "QuantizeLinear":
                return True
            if requested == "fp16" and node.op_type == "Cast" and any(
                    a.name == "to" and a.i == half for a in node.attribute):
                return True
        if requested == "fp16" and any(t.data_type == half for t in g.initializer):
            return True
    return False


def assert_precision(summary: PrecisionSummary, requested: str, min_share: float,
                     onnx_reduced: bool | None = None) -> float | None:
    """Raise PrecisionNotAchievedError unless at least ``min_share`` of the typed compute
    layers run in the requested (or a narrower) precision. Returns the share achieved.

    When every compute layer is a fused subgraph that hides its precision, the engine cannot
    answer; then ``onnx_reduced`` (does the parsed ONNX carry the reduced types? a strongly typed
    build must follow them) decides: False fails, True returns None (logged), None fails too."""
    if requested not in REDUCED:
        return 1.0
    if not summary.detailed:
        raise PrecisionNotAchievedError(
            "cannot check the achieved precision: the engine inspector reported layer names only",
            hint="trtconv builds with DETAILED profiling verbosity; a plugin or TensorRT build without it "
            "hides layer types",
        )
    if not summary.by_dtype and summary.opaque_layers:
        # Everything was fused: the engine cannot show its precision. Strong typing makes TensorRT
        # follow the ONNX's explicit types, so those decide; say so.
        if not onnx_reduced:
            raise PrecisionNotAchievedError(
                f"asked for {requested}, but the engine's layers are fused subgraphs that hide their precision "
                f"and the ONNX it was built from has no {requested} types; the engine was not kept",
                hint="check that the precision stage converted the graph (see its report)",
            )
        log.warning("the engine's %d layer(s) are fused subgraphs that hide their precision; the %s types "
                    "come from the prepared ONNX (strongly typed build)", summary.opaque_layers, requested)
        return None
    share = summary.share(REDUCED[requested])
    if share < min_share:
        counts = ", ".join(f"{n} {t}" for t, n in summary.by_dtype) or "no typed layers"
        some = share >= 0.01  # a mix the user may accept: the hint is their command with the share it reached
        # none: the engine is what the next wider precision builds (a front-end whose ranges FP16 cannot hold)
        wider = {"int8": "fp16", "fp16": "fp32"}[requested]
        raise PrecisionNotAchievedError(
            f"asked for {requested}, but only {share:.0%} of the engine's compute layers run in it "
            f"({counts}); the engine was not kept",
            hint=("if this mix is intended; " if some else "")
            + "the precision stage's report says which layers it kept and why; TensorRT follows the types in the "
            "ONNX (strong typing)",
            retry=("--min-precision-share", f"{math.floor(share * 100) / 100:g}") if some else ("--precision", wider),
        )
    return share
