"""TensorRT-RTX product limits: ops the RTX parser or builder refuses because RTX ships no
plugin library or no kernel for them, not because of parser logic shared with TensorRT 10/11.

Cases that use one are listed on their own (never counted as agreement, never hidden):
`check --trt rtx` may be right or wrong about them, but they say nothing about how well
the tables model the parser. Each entry: op type -> (condition on the node, levels, reason);
``levels`` says which verdicts the limit takes out of the count: a plugin-backed op is
refused by the parser ("parse" and "build"); ops that parse but have no RTX kernel to build
("build") still count at the parse level, where the parser logic is the 11.x one.
Listed the same way: a custom-domain op the parser imports as a different ONNX op and builds
(``trtconv.analyze.COLLISIONS``, ``WRONG_ENGINE``): the real verdict "ok" is a wrong engine, and
`check` refuses it by design, so neither level is a measure of the tables.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import helper

from trtconv.analyze import COLLISIONS, WRONG_ENGINE
from trtconv.onnxutil import iter_graphs


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _always(node: onnx.NodeProto) -> bool:
    return True


BOTH, BUILD = ("parse", "build"), ("build",)
LIMITS: dict[str, tuple[Callable[[onnx.NodeProto], bool], tuple[str, ...], str]] = {
    "DeformConv": (_always, BOTH, "imported as libnvinfer_plugin's ModulatedDeformConv2d: RTX has no plugin library"),
    "RoiAlign": (_always, BOTH, "imported as the ROIAlign_TRT plugin, whose constructor needs a CUDA device"),
    "DFT": (_always, BOTH, "the cuFFT-based DFT plugin is not in TensorRT-RTX"),
    "STFT": (_always, BOTH, "built on DFT: the cuFFT-based plugin is not in TensorRT-RTX"),
    "NonMaxSuppression": (_always, BUILD, "parses to INMSLayer, but the RTX builder has no ahead-of-time runner"),
    "Attention": (_always, BUILD, "parses, but the RTX builder needs a dedicated attention kernel for each variant"),
    "ScatterElements": (lambda n: _attr(n, "reduction", "none") not in ("none",), BOTH,
                        "reductions are implemented by a plugin in the 10.x/11.x parser; RTX has none"),
}


def product_limit(model: onnx.ModelProto) -> tuple[str, tuple[str, ...]] | None:
    """('Op: reason', levels) for the node of ``model`` that hits an RTX product limit, else None
    (a parse-and-build limit wins over a build-only one)."""
    found = None
    for node in (n for g in iter_graphs(model.graph) for n in g.node):
        collision = COLLISIONS.get((node.domain, node.op_type))
        if collision is not None and collision.outcome == WRONG_ENGINE:  # by design: check refuses what builds
            return f"{node.domain}::{node.op_type}: not a product limit, a wrong engine: {collision.why}", BOTH
        entry = LIMITS.get(node.op_type)
        if entry and node.domain in ("", "ai.onnx") and entry[0](node):
            if found is None or len(entry[1]) > len(found[1]):
                found = (f"{node.op_type}: {entry[2]}", entry[1])
    return found
