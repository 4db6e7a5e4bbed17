"""What a DCN target is: the data ``--dcn-target`` chooses (an emitter, how it is proven, what it
needs), and the helpers several targets share. The targets themselves: :mod:`.targets`.

TensorRT needs symmetric pads: asymmetric ones become an explicit zero ``Pad`` of the
input plus the symmetric remainder, which samples exactly the same values (bilinear
sampling treats outside pixels as zeros).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from trtconv.rewrites.dcn.dialects import DcnNode
from trtconv.rewrites.dcn.plugin_spec import PluginSpec
from trtconv.rewrites.emitter import Emitter


@dataclass(frozen=True)
class DcnInputs:
    """The original node's tensors by role (mask and bias may be absent)."""

    x: gs.Tensor
    offset: gs.Tensor
    mask: gs.Tensor | None
    weight: gs.Tensor
    bias: gs.Tensor | None


# (emitter, the DCN, its input tensors, the output tensor, the plugin spec or None) -> nodes added to the emitter
Emit = Callable[[Emitter, DcnNode, DcnInputs, gs.Tensor, PluginSpec | None], None]


@dataclass(frozen=True)
class DcnTarget:
    name: str
    emit: Emit
    # > 0: standard ONNX ops (emitted in PENDING_DOMAIN), run by ONNX Runtime in the proof; the
    # model's default opset is raised to this. 0: a plugin node, run by onnx's reference evaluator.
    opset: int = 0
    opset_op: str = ""  # the op that needs ``opset``, for messages
    spec: PluginSpec | None = None  # the plugin node's fixed spec
    needs_spec: bool = False  # the spec comes from RewriteSettings.dcn_plugin
    # asymmetric pads: "pad-node" (explicit Pad + symmetric pads), "spec" (as the plugin spec
    # says: a symmetric "padding" field or four "pads"), "taps" (built into the sampling; no note)
    pads: str = "pad-node"
    # imported by TensorRT through its ModulatedDeformConv2d, which may swap h and w
    trt_modulated_deform_conv: bool = False
    proof_max_side: int | None = None  # the node proof's spatial size at most this (None: the model's, if cheap)
    # computes the op another way (rounded differently): its node proof holds it to the float64
    # reference, and the graph proof (1e-6, for exact rewrites) is cut at its output
    cut_graph_proof: bool = False
    # a model-level step before the graph is imported (e.g. shapes the emitter bakes in); not for
    # models over the large-model threshold
    prepare: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None

    def plugin(self, configured: PluginSpec | None) -> PluginSpec | None:
        return configured if self.needs_spec else self.spec

    def pads_note(self, pads: tuple[int, int, int, int], spec: PluginSpec | None) -> str | None:
        if self.pads == "taps":
            return None
        if self.pads == "pad-node" or (spec is not None and spec.symmetric_pads):
            return f"asymmetric pads {list(pads)}: explicit zero Pad + symmetric pads"
        return f"asymmetric pads {list(pads)} passed to the plugin"


def symmetric_split(pads: tuple[int, int, int, int]) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """(symmetric part (h, w), extra explicit padding (top, left, bottom, right))."""
    t, left, b, r = pads
    sh, sw = min(t, b), min(left, r)
    return (sh, sw), (t - sh, left - sw, b - sh, r - sw)


def padded_input(em: Emitter, x: gs.Tensor, extra: tuple[int, int, int, int]) -> gs.Tensor:
    if not any(extra):
        return x
    t, left, b, r = extra
    amounts = em.const("pad_amounts", np.array([0, 0, t, left, 0, 0, b, r], dtype=np.int64))
    out = em.var("padded_input", dtype=x.dtype)
    em.node("Pad", "pad", [x, amounts], [out], {"mode": "constant"})
    return out
