"""The user's model as ONNX Runtime can run it, for the build's profile check and verify."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from trtconv.errors import (
    InvalidModelError,
    TrtconvError,
)
from trtconv.load import LoadedModel
from trtconv.onnxutil import iter_graphs
from trtconv.reference import ort
from trtconv.rewrites import RewriteResult, RewriteSettings, rewrite, rewrite_rule_for


@dataclass(frozen=True)
class ReferenceGraph:
    """A graph ONNX Runtime runs that computes what the user's model computes."""

    model: onnx.ModelProto
    path: Path | None  # where it is saved, if it is (ORT loads models over 2 GB only from disk)
    label: str
    session: Any = field(default=None, compare=False)  # its ONNX Runtime session: one per graph, for corners and verify


class Reference:
    """The user's model as ONNX Runtime can run it, found once and on first need: the model
    itself; else the rewritten graph (proven equal to it); else the model with its DCN nodes
    rewritten to ONNX DeformConv (when rewrite targeted a plugin ORT cannot run)."""

    def __init__(self, loaded: LoadedModel, rewritten: RewriteResult, *, head: bool = False) -> None:
        self.loaded = loaded
        self.rewritten = rewritten
        self.head = head  # ``loaded`` is the head of a --split-tail cut: its proto, not the file, is the model

    @functools.cached_property
    def rewritten_runs(self) -> bool:
        return ort_runnable(self.rewritten.model)

    @functools.cached_property
    def deformconv(self) -> onnx.ModelProto | None:
        """The model with DCN nodes rewritten to ONNX DeformConv (ONNX Runtime runs it), or None."""
        proto = self.loaded.proto
        if not any(rewrite_rule_for(n.domain, n.op_type) for g in iter_graphs(proto.graph) for n in g.node):
            return None  # no DCN op: nothing a DeformConv form would change
        try:
            return rewrite(self.loaded, RewriteSettings(dcn_target="deformconv", verify=False)).model
        except TrtconvError:
            return None

    def release_session(self) -> None:
        """Drop the reference graph's session once the corners ran (verify reuses their outputs, not the
        session): it holds the model's weights, which must not stay in memory through the TensorRT build."""
        graph = self.__dict__.get("graph")
        if graph is not None:
            self.__dict__["graph"] = replace(graph, session=None)

    @functools.cached_property
    def graph(self) -> ReferenceGraph | None:
        try:
            if self.head:
                return ReferenceGraph(self.loaded.proto, None, "its head: the graph before the split",
                                      ort.session(self.loaded.proto))
            return ReferenceGraph(self.loaded.proto, self.loaded.path, "original", ort.session(self.loaded.path))
        except InvalidModelError:
            pass
        if self.rewritten_runs:
            return ReferenceGraph(self.rewritten.model, None, "rewritten")
        if self.deformconv is not None and ort_runnable(self.deformconv):
            return ReferenceGraph(self.deformconv, None, "original with DCN as DeformConv")
        return None



def ort_runnable(model: onnx.ModelProto) -> bool:
    try:
        ort.session(model)
    except InvalidModelError:
        return False
    return True
