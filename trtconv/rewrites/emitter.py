"""Building replacement nodes with unique, deterministic names derived from the original node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

# Replacements made of standard ops are emitted in this private domain first and moved to the
# default domain after the model's opset has been raised to what they need (onnx's version
# converter refuses DeformConv itself and unknown default-domain ops).
PENDING_DOMAIN = "trtconv.pending"

# Domain given to plugin nodes (every family that emits them). TensorRT's fallback importer looks
# the plugin up by op type, plugin_version and plugin_namespace (we always set all three); the
# domain only keeps onnx.checker from confusing the node with a (nonexistent) standard op.
PLUGIN_DOMAIN = "trt.plugins"


class Emitter:
    """Collects the nodes one rewrite builds; every node and tensor is named ``<base>/<suffix>``."""

    def __init__(self, graph: gs.Graph, base: str) -> None:
        self.graph = graph
        self.base = base
        self.nodes: list[gs.Node] = []

    def var(self, suffix: str, dtype: Any = None, shape: Any = None) -> gs.Variable:
        return gs.Variable(f"{self.base}/{suffix}", dtype=dtype, shape=shape)

    def const(self, suffix: str, values: np.ndarray) -> gs.Constant:
        return gs.Constant(f"{self.base}/{suffix}", values)

    def node(self, op: str, suffix: str, inputs: list[gs.Tensor], outputs: list[gs.Tensor],
             attrs: Mapping[str, Any] | None = None, domain: str | None = None) -> gs.Node:
        n = gs.Node(op, name=f"{self.base}/{suffix}", attrs=dict(attrs or {}), inputs=inputs, outputs=outputs,
                    domain=domain)
        self.nodes.append(n)
        return n
