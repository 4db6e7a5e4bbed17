"""Where an FP16 model's error starts, when it fails its accuracy check.

The check names outputs; what a user can act on is a node (``--exclude NAME``). Every float tensor
the FP32 model and the FP16 model's exact-rounding twin share (by name: the conversion keeps node
output names) is compared on a few samples, as a relative L2 error; the nodes where that error
crosses ``threshold`` while every float input of theirs is still below it are where the error
starts. Keeping such a node in FP32 may not be enough (a cancellation ``(x + 1000) - 1000`` is
lost when its inputs were stored in FP16), so the caller tries the nodes alone, then with what
feeds them, and says which kept the samples within the thresholds.
"""

from __future__ import annotations

import glob
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from trtconv.onnxutil import GraphView, Site
from trtconv.precision.expose import session_exposing
from trtconv.precision.fp16_graph import emulate_half, inferred_structure
from trtconv.precision.peaks import float_tensors
from trtconv.reference import ort

Sample = Mapping[str, np.ndarray]
# the errors that start here, at most (a model whose FP16 goes wrong everywhere names its first few)
MAX_STARTS = 3
# samples the search for the start runs (two runs exposing every tensor each), and the most a set of nodes
# kept in FP32 is then checked on (only after a failed check)
LOCATE_SAMPLES = 2
MAX_SAMPLES = 8


@dataclass(frozen=True)
class ErrorStart:
    """A node whose float output's relative error crosses the threshold while its inputs' do not."""

    node: str
    op_type: str
    error_in: float  # the largest relative L2 error among its float inputs (0: graph inputs, constants)
    error_out: float  # its float outputs' largest
    feeds: tuple[str, ...]  # the nodes producing its float inputs (kept too in the second try)

    def describe(self) -> str:
        return f"{self.node} ({self.op_type}: relative error {self.error_out:.2g} from {self.error_in:.2g} at its inputs)"


def threshold_for(min_cosine: float | None) -> float:
    """Half the relative L2 error a cosine limit allows (cos = 1 - e^2 / 2 for a small error e)."""
    allowed = math.sqrt(2 * (1 - min_cosine)) if min_cosine is not None and min_cosine < 1 else 0.045
    return max(allowed / 2, 1e-4)


def error_starts(reference: onnx.ModelProto, fp16_model: onnx.ModelProto, half_tensors: frozenset[str],
                 samples: Sequence[Mapping[str, np.ndarray]], threshold: float,
                 half_inputs: frozenset[str] = frozenset()) -> tuple[ErrorStart, ...]:
    """The first nodes (in ``reference``'s order, main graph) where the FP16 twin's error crosses ``threshold``.

    ``half_inputs``: the inputs the FP16 model takes in FP16 (rounded so before the twin reads them)."""
    twin = emulate_half(fp16_model, set(half_tensors))
    view = GraphView(reference)
    # float32 node outputs of the main graph (subgraph values reach it through their If/Loop)
    floats = {t for t in float_tensors(inferred_structure(reference) or reference)
              if (site := view.producer(t)) is not None and site.path == "main"}
    shared = sorted(floats & set(GraphView(twin).produced()))
    if not shared or not samples:
        return ()
    ref_sess, ref_map = session_exposing(reference, shared)
    twin_sess, twin_map = session_exposing(twin, shared)
    errors: dict[str, float] = {}
    for sample in samples:
        a = ort.run(ref_sess, sample)
        b = ort.run(twin_sess, {k: np.asarray(v).astype(np.float16).astype(np.float32) if k in half_inputs else v
                                for k, v in sample.items()})
        got = {twin_map[k]: v for k, v in b.items() if k in twin_map}
        for out, tensor in ref_map.items():
            if out in a and tensor in got:
                errors[tensor] = max(errors.get(tensor, 0.0), _relative(a[out], got[tensor]))
    half_view = GraphView(fp16_model)

    def error_at(tensor: str, depth: int = 0) -> float:
        """A tensor's error; one the FP16 model no longer has (a Conv's output before the BatchNormalization
        folded into it) takes the error of what its producer read."""
        if tensor in errors or depth > 4:
            return errors.get(tensor, 0.0)
        site = view.producer(tensor)
        return max((error_at(i, depth + 1) for i in site.node.input if i in floats), default=0.0) if site else 0.0

    starts: dict[str, ErrorStart] = {}
    for node in reference.graph.node:
        outs = [o for o in node.output if o in errors]
        if not outs or max(errors[o] for o in outs) < threshold:
            continue
        ins = [error_at(i) for i in node.input if i in floats]  # the float inputs some node computes
        if ins and max(ins) >= threshold:
            continue  # the error came in with its inputs
        # named as the FP16 model names the node that computes it (a folded BatchNormalization's output: its Conv)
        site = half_view.producer(outs[0])
        if node.op_type != "Cast":  # past the Cast back to FP32 the conversion put after it (a graph output)
            site = _past_casts(half_view, site)
        doer = site.node if site is not None else node
        if doer.name not in starts:
            starts[doer.name] = ErrorStart(doer.name, doer.op_type, max(ins, default=0.0),
                                           max(errors[o] for o in outs), _feeding(half_view, doer))
        if len(starts) == MAX_STARTS:
            break
    return tuple(starts.values())


def _feeding(view: GraphView, node: onnx.NodeProto) -> tuple[str, ...]:
    """The nodes whose outputs ``node`` reads, looking back through the Casts the conversion put between them."""
    out: dict[str, None] = {}
    for name in node.input:
        site = _past_casts(view, view.producer(name) if name else None)
        if site is not None:
            out[site.node.name] = None
    return tuple(out)


def _past_casts(view: GraphView, site: Site | None) -> Site | None:
    while site is not None and site.node.op_type == "Cast" and site.node.input:
        site = view.producer(site.node.input[0])
    return site


def kept_in_fp32(starts: Sequence[ErrorStart], meets: Callable[[tuple[str, ...], Sequence[Sample]], bool],
                 few: Sequence[Sample], samples: Sequence[Sample]) -> tuple[str, ...]:
    """The first of two sets of nodes whose keeping in FP32 ``meets`` the thresholds, on ``few`` and then on all of
    ``samples``: the starting nodes, then those with the nodes feeding them (a cancellation is lost once its
    inputs were stored in FP16); () where neither does. Where FP16 goes wrong is a property of the graph, not
    of a sample: a set that fails on ``few`` is not tried on more."""
    first = tuple(s.node for s in starts)
    fed = tuple(dict.fromkeys(first + tuple(f for s in starts for f in s.feeds)))
    for keep in dict.fromkeys((first, fed)):
        if keep and meets(keep, few) and (len(samples) == len(few) or meets(keep, samples)):
            return keep
    return ()


def refusal_hint(keep: tuple[str, ...], checked: int, floor: str | None, excluded: Sequence[str] = (),
                 ) -> tuple[str, tuple[str, str] | None]:
    """(hint, retry flag and value) of a failed check: the nodes found to keep in FP32 where there are (with the
    ``excluded`` patterns already given: the retry's ``--exclude`` replaces the command's), else the near miss's
    ``--min-cosine floor`` with the other ways out."""
    if keep:
        patterns = ",".join([*excluded, *(glob.escape(n) for n in keep)])
        return (f"keeps {', '.join(keep)} in FP32: that met the thresholds on the {checked} sample(s) searched "
                "(the rerun checks them all)", ("--exclude", patterns))
    hint = (("if this error is acceptable; or " if floor else "")
            + "keep the offending nodes in FP32 (--exclude NAME / --exclude-op OP), lower --max-activation"
            + ("" if floor else ", or relax the thresholds"))
    return hint, (("--min-cosine", floor) if floor else None)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape or a.size == 0:
        return 0.0
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    bad = ~np.isfinite(b64)
    if bad.any() and np.isfinite(a64[bad]).any():
        return math.inf
    ok = np.isfinite(a64) & np.isfinite(b64)
    norm = float(np.linalg.norm(a64[ok]))
    diff = float(np.linalg.norm(a64[ok] - b64[ok]))
    return diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)

