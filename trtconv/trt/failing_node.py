"""Where a failed build starts to fail: the first ONNX node whose joining the graph breaks the builder.

TensorRT's builder can refuse a graph its parser accepted, in words that point nowhere (TensorRT-RTX's
Myelin compiler: "shape.cpp:6867: CHECK(false) failed"), and `trtconv check` reads the parser only. So
when a build fails, the builder's own words are searched for a layer first (Myelin names one in some
errors: ``name=<layer>``); failing that, prefixes of the graph are built — its nodes in their
topological order up to ``k``, every tensor a later node reads marked an output — bisecting for the
first ``k`` that fails. What is reported is what two real builds said: the graph through the node
before builds, through this node it does not. Each build runs in a child process, so a builder that
crashes (a segmentation fault is one answer TensorRT gives) is a failed build, not the end of trtconv;
a time budget bounds the search (it narrows a range when it runs out).
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from trtconv.plan import BuildPlan
from trtconv.trt.flavour import Flavour

LOCATE_BUDGET_S = 120.0  # wall time for the prefix builds after a failed build
PHASE = "locating the node the builder fails on (prefix builds, at most {budget:.0f} s)"
_LAYER = re.compile(r"\bname=(\S+)")


@dataclass(frozen=True)
class FailingNode:
    """The node a build failure starts at, and how that is known."""

    name: str
    op: str
    index: int  # in the graph's node list
    how: str  # "named by the builder" | "prefix builds"
    builds_before: int | None = None  # prefix builds: the last node index the graph builds through
    narrowed_to: int | None = None  # time ran out: the failure starts at a node in (narrowed_to, index]
    builds: int = 0  # prefix graphs built

    def describe(self) -> str:
        node = f"node {self.name or f'#{self.index}'} ({self.op})"
        if self.how == "named by the builder":
            return f"the builder names {node}"
        if self.narrowed_to is not None:
            since = f"the graph builds through node #{self.narrowed_to} and " if self.narrowed_to >= 0 else "it "
            return (f"{since}fails by {node} (#{self.index}); the search stopped there ({self.builds} prefix "
                    f"builds in the time allowed)")
        return (f"it fails once {node} joins the graph: the nodes before it build "
                f"({self.builds} prefix builds, each in its own builder)")


def named_node(messages: Sequence[str], model: onnx.ModelProto) -> FailingNode | None:
    """The ONNX node a builder error names (Myelin: ``name=<layer>``, the layer named after the node,
    perhaps with a suffix of its own), or None."""
    nodes = {n.name: (i, n.op_type) for i, n in enumerate(model.graph.node) if n.name}
    for message in messages:
        for layer in _LAYER.findall(message):
            layer = layer.rstrip(",;)")
            best = max((name for name in nodes if layer == name or layer.startswith(name + "_")),
                       key=len, default=None)
            if best is not None:
                index, op = nodes[best]
                return FailingNode(best, op, index, "named by the builder")
    return None


def prefix_model(model: onnx.ModelProto, k: int, typed: dict[str, onnx.ValueInfoProto]) -> onnx.ModelProto | None:
    """The graph's first ``k`` nodes with every tensor a later node or the graph's output reads as an
    output (typed ones only: an untyped output cannot be declared), or None where that leaves none."""
    g = model.graph
    produced = [t for n in g.node[:k] for t in n.output if t]
    read_later = {t for n in g.node[k:] for t in _reads(n)} | {o.name for o in g.output}
    outputs = [typed[t] for t in dict.fromkeys(produced) if t in read_later and t in typed]
    if not outputs:
        return None
    used = {t for n in g.node[:k] for t in _reads(n)}
    graph = helper.make_graph(list(g.node[:k]), g.name or "prefix", list(g.input), outputs,
                              [i for i in g.initializer if i.name in used])
    out = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


def _reads(node: onnx.NodeProto) -> list[str]:
    """What a node reads, including what its subgraphs read from outside them."""
    names = [t for t in node.input if t]
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            for inner in sub.node:
                names.extend(_reads(inner))
    return names


Builds = Callable[[Path, float], "bool | None"]  # (a prefix's ONNX, seconds left) -> built? None: cannot tell


def plan_builds(plan: BuildPlan, flavour: Flavour) -> Builds:
    """Prefix builds as ``plan`` configures its build (profiles, compute capabilities, plugins), each in a child."""
    return lambda path, left: _builds_in_child(replace(plan, onnx_path=path), flavour, left)


def locate(onnx_path: Path, messages: Sequence[str], builds: Builds, *,
           budget_s: float = LOCATE_BUDGET_S, progress: Any = None) -> FailingNode | None:
    """The node a failed build of ``onnx_path`` starts at: named in ``messages``, else by prefix builds
    (``builds``; shown as a phase of ``progress``, the build's ProgressSink, if given). None where it cannot
    be told (a model with external data, nothing learned within the budget)."""
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - whatever the file is, the build's own error stands
        return None
    named = named_node(messages, model)
    if named is not None:
        return named
    if any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer):
        return None  # a prefix per build would copy the weights: not worth the disk and the wait
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    typed.update({o.name: o for o in model.graph.output})
    typed.update({i.name: i for i in model.graph.input})
    typed = {n: v for n, v in typed.items() if v.type.tensor_type.elem_type}
    nodes = model.graph.node
    phase = PHASE.format(budget=budget_s)
    if progress is not None:
        progress.phase_start(phase, None, max(1, len(nodes)).bit_length())
    deadline = time.monotonic() + budget_s
    good, bad, tried = 0, len(nodes), 0  # the first `good` nodes build (none: trivially); all `bad` fail
    with tempfile.TemporaryDirectory(prefix="trtconv-prefix-") as tmp:
        while bad - good > 1 and (left := deadline - time.monotonic()) > 0:
            mid = (good + bad) // 2
            sub = prefix_model(model, mid, typed)
            if sub is None:  # nothing to mark an output yet: nothing for the builder to refuse
                good = mid
                continue
            path = Path(tmp) / f"prefix{mid}.onnx"
            onnx.save(sub, str(path))
            built = builds(path, left)
            if built is None:
                break  # out of time, or a prefix that tells nothing: what is known so far stands
            tried += 1
            good, bad = (mid, bad) if built else (good, mid)
            if progress is not None:
                progress.step(phase, tried)
    if progress is not None:
        progress.phase_finish(phase)
    if tried == 0 or (good == 0 and bad == len(nodes)):
        return None
    node = nodes[bad - 1]
    return FailingNode(node.name, node.op_type, bad - 1, "prefix builds", builds_before=good - 1,
                       narrowed_to=None if bad - good == 1 else good - 1, builds=tried)


# the child's exit codes; none is 1, Python's own for an uncaught exception: a child that failed for a reason of
# its own (an import, a bad ticket) tells nothing about the prefix and must not read as "the builder refused it"
BUILT, NOT_PARSED, NOT_SET_UP, NOT_BUILT = 0, 3, 4, 5
CHILD = "trtconv.trt.prefix_build"  # the module a child runs (it imports the builder, which imports this)


def _builds_in_child(plan: BuildPlan, flavour: Flavour, timeout_s: float) -> bool | None:
    """Whether the builder makes an engine of ``plan`` (a crash is a no); None when it cannot be told
    (time ran out, the prefix did not parse or set up, the child did not start)."""
    ticket = plan.onnx_path.with_suffix(".plan.pickle")
    ticket.write_bytes(pickle.dumps((plan, flavour)))
    try:  # a fresh interpreter, not multiprocessing: it must not depend on how the parent was started
        code = subprocess.run([sys.executable, "-m", CHILD, str(ticket)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return None
    if code < 0:  # killed by a signal: the builder crashed on this prefix
        return False
    return {BUILT: True, NOT_BUILT: False}.get(code)
