"""DCNv2 forward: trtconv's fused kernel against torchvision and cuDNN's dense conv (GPU only).

Runs the PTX the TensorRT plugin embeds (through CuPy) on the three layer shapes of
docs/dcn-perf.md, in FP16, FP32 I/O with TF32 math (TensorRT's default) and strict FP32,
and on three more FP16 shapes (a CenterNet head, a stride-2 layer, a large batch).
Columns: this kernel in each layout of x (best tile, as TensorRT's tactic timing would
pick), torchvision ``deform_conv2d``, cuDNN dense conv2d of the same shape in *both*
layouts (NCHW and channels-last, each on its own freshly made tensors, same process), the
roofline bound, and the relative error of each DCN against float64. Ratios against cuDNN
use the faster cuDNN layout and the faster plugin layout, so like is compared with like.
Times are medians of CUDA-event timed batches.

The ``portable`` columns time the plugin-free form (``trtconv rewrite --dcn-target portable``):
the ONNX graph trtconv emits for the layer, its nodes executed one by one with the matching
PyTorch op (Gather → ``index_select``, Gemm → cuBLAS ``addmm``, ...), captured in a CUDA
graph so launch overhead stays out as it does in a TensorRT engine; ``fused`` runs the same
graph with every node but the product compiled by ``torch.compile``, as TensorRT-RTX's
builder fuses them (see HEAVY). The last tables put both forms side by side against cuDNN,
torchvision and the roofline, and split the portable time into its parts.

    python benchmarks/dcn_bench.py [--json out.json] [--quick] [--graphs DIR] [--plugin-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

# key -> (N, C, Cout, H=W, stride, math modes). (a)-(c): docs/dcn-perf.md; (d) a CenterNet-style
# head; (e) stride 2; (f) a large batch of small maps.
ALL_MODES = ("fp16", "tf32", "fp32")
SHAPES: dict[str, tuple[int, int, int, int, int, tuple[str, ...]]] = {
    "a": (1, 64, 64, 128, 1, ALL_MODES),
    "b": (8, 256, 256, 64, 1, ALL_MODES),
    "c": (1, 512, 512, 32, 1, ALL_MODES),
    "d": (1, 256, 128, 32, 1, ("fp16",)),
    "e": (8, 256, 256, 64, 2, ("fp16",)),
    "f": (32, 128, 128, 40, 1, ("fp16",)),
}
# Datasheet ceilings (dcn-perf.md §3.1): HBM bytes/s, and FLOP/s per math mode.
HBM = {"H100": 3.35e12, "H200": 4.8e12}
PEAK = {"fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}


def out_size(h: int, stride: int) -> int:
    """Output height of a 3x3 convolution with padding 1."""
    return (h - 1) // stride + 1


def roofline_us(n: int, c: int, cout: int, h: int, stride: int, mode: str, gpu: str) -> float:
    ho = out_size(h, stride)
    p = n * ho * ho
    flops = 2 * p * cout * c * 9
    elems = n * c * h * h + n * 27 * ho * ho + cout * c * 9 + cout + n * cout * ho * ho
    nbytes = elems * (2 if mode == "fp16" else 4)
    return max(nbytes / HBM.get(gpu, HBM["H100"]), flops / PEAK[mode]) * 1e6


def layer_inputs(torch: Any, gen: Any, n: int, c: int, cout: int, h: int, stride: int, dtype: Any) -> tuple[Any, ...]:
    """Random inputs of one 3x3 DCNv2 layer, NCHW: x, weight (OIHW), bias, offset (~2 px), mask."""
    ho = out_size(h, stride)

    def rnd(*shape: int, scale: float = 1.0, dt: Any = dtype) -> Any:
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dt)

    x = rnd(n, c, h, h)
    w = rnd(cout, c, 3, 3, scale=(9 * c) ** -0.5)
    b = rnd(cout)
    off = rnd(n, 18, ho, ho, scale=2.0)
    msk = torch.sigmoid(rnd(n, 9, ho, ho, dt=torch.float32)).to(dtype)
    return x, w, b, off, msk


def dense_conv_us(torch: Any, gen: Any, n: int, c: int, cout: int, h: int, stride: int, dtype: Any,
                  iters: int, reps: int) -> dict[str, float]:
    """cuDNN's dense 3x3 conv of the same shape, NCHW and channels-last, each timed on its own
    freshly made x/weight/bias (cudnn.benchmark picks the algorithm per layout)."""
    import torch.nn.functional as F

    times = {}
    for name, fmt in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        x = torch.randn(n, c, h, h, generator=gen, device="cuda").to(dtype).contiguous(memory_format=fmt)
        w = (torch.randn(cout, c, 3, 3, generator=gen, device="cuda") * (9 * c) ** -0.5).to(dtype)
        w = w.contiguous(memory_format=fmt)
        b = torch.randn(cout, generator=gen, device="cuda").to(dtype)
        y = F.conv2d(x, w, b, stride=stride, padding=1)
        if not y.is_contiguous(memory_format=fmt):
            raise SystemExit(f"cuDNN conv did not keep the {name} layout")
        times[name] = time_us(torch, lambda x=x, w=w, b=b: F.conv2d(x, w, b, stride=stride, padding=1), iters, reps)
        del x, w, b, y
    return times


def time_us(torch, fn, iters: int, reps: int) -> float:
    """Median over `reps` of the mean device time of `iters` back-to-back launches (CUDA events)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        # Keep the GPU busy while the host enqueues the batch, so launch overhead stays out.
        torch.cuda._sleep(4_000_000)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(samples)


def portable_graph(n: int, c: int, cout: int, h: int, fp16: bool, stride: int = 1) -> Any:
    """The ONNX graph ``trtconv rewrite --dcn-target portable`` emits for one 3x3 DCNv2 layer
    (x, offset, mask, weight, bias all graph inputs, so the benchmark feeds its own tensors),
    with what depends only on the (static) shapes folded to constants, as a TensorRT builder
    does for an engine of static shapes."""
    import onnx_graphsurgeon as gs
    from onnx import TensorProto, helper

    from trtconv.rewrites import RewriteSettings, rewrite

    t = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    ho = out_size(h, stride)
    shapes = {"x": [n, c, h, h], "weight": [cout, c, 3, 3], "offset": [n, 18, ho, ho], "bias": [cout],
              "mask": [n, 9, ho, ho]}
    node = helper.make_node("DeformConv", list(shapes), ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3],
                            strides=[stride, stride])
    g = helper.make_graph([node], "dcn", [helper.make_tensor_value_info(k, t, v) for k, v in shapes.items()],
                          [helper.make_tensor_value_info("y", t, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    portable = rewrite(model, RewriteSettings(dcn_target="portable")).model  # node proof: ONNX Runtime vs float64
    graph = gs.import_onnx(portable)
    graph.fold_constants().cleanup()
    return gs.export_onnx(graph)


def torch_runner(torch: Any, model: Any, device: str = "cuda", fuse: bool = False, alone: tuple[str, ...] = (),
                 fixed: dict[str, Any] | None = None) -> Any:
    """``fn(feeds, until=()) -> tensors by name``: the ONNX graph's nodes in order, each as its
    PyTorch op, up to the first node of a type in ``until``. ``fuse``: every run of nodes other
    than HEAVY's is compiled by ``torch.compile`` (Inductor) into fused kernels (casts,
    element-wise arithmetic, gathers, reductions, reshapes, transposes), as TensorRT-RTX's
    builder fuses them; HEAVY's nodes run as their PyTorch ops (grid_sample, cuDNN, cuBLAS),
    and so do the nodes writing the tensors named in ``alone``. A fused kernel starts at the
    corner Gather: the corner indices and weights are written once before it, not recomputed
    for every channel inside it."""
    import torch.nn.functional as F
    from onnx import helper, numpy_helper

    host = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts = {k: torch.from_numpy(v.copy()).to(device) for k, v in host.items()}
    types = {1: torch.float32, 6: torch.int32, 7: torch.int64, 10: torch.float16}

    def reshape(v: Any, shape: list[int]) -> Any:  # shapes stay on the host: no copies in a CUDA graph
        return v.reshape([v.shape[i] if d == 0 else d for i, d in enumerate(shape)])

    def expand(v: Any, shape: list[int]) -> Any:  # ONNX Expand broadcasts both ways
        shape = [1] * (v.dim() - len(shape)) + list(shape)
        dims = [1] * (len(shape) - v.dim()) + list(v.shape)
        return v.reshape(dims).expand([max(a, b) for a, b in zip(dims, shape)])

    def conv(v: Any, w: Any, b: Any = None, **a: Any) -> Any:
        return F.conv2d(v, w, b, a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])[:2],
                        a.get("dilations", [1, 1]), a.get("group", 1))

    def gather(v: Any, i: Any, axis: int = 0) -> Any:  # ONNX Gather: any index rank, a scalar drops the axis
        axis %= v.dim()
        picked = torch.index_select(v, axis, i.reshape(-1).long())
        return picked.reshape(list(v.shape[:axis]) + list(i.shape) + list(v.shape[axis + 1:]))

    def pad(v: Any, **a: Any) -> Any:  # constant mode with zeros, as the portable form pads
        p = a["pads"]
        half = len(p) // 2
        return F.pad(v, [q for d in reversed(range(half)) for q in (p[d], p[d + half])])

    def gemm(u: Any, v: Any, b: Any = None, **a: Any) -> Any:
        u = u.t() if a.get("transA") else u
        v = v.t() if a.get("transB") else v
        return torch.mm(u, v) if b is None else torch.addmm(b, u, v)

    def slice_(v: Any, **a: Any) -> Any:  # a view, as a runtime reads a slice in place
        index = [slice(None)] * v.dim()
        for i, axis in enumerate(a.get("axes", range(len(a["starts"])))):
            index[axis % v.dim()] = slice(a["starts"][i], a["ends"][i], a.get("steps", [1] * len(a["starts"]))[i])
        return v[tuple(index)]

    def reduce_sum(v: Any, **a: Any) -> Any:
        # ONNX keeps the type (torch.sum would widen INT32 to INT64)
        return torch.sum(v, dim=a["axes"], keepdim=bool(a.get("keepdims", 1)),
                         dtype=None if v.is_floating_point() else v.dtype)

    ops = {
        "Cast": lambda v, **a: v.to(types[a["to"]]),
        "Gather": lambda v, i, **a: gather(v, i, a.get("axis", 0)),
        "Reshape": lambda v, **a: reshape(v, a["shape"]),
        "Mul": lambda u, v, **a: u * v,
        "Add": lambda u, v, **a: u + v,
        "Sub": lambda u, v, **a: u - v,
        "Div": lambda u, v, **a: u / v,
        "Max": lambda u, v, **a: torch.maximum(u, v),
        "Min": lambda u, v, **a: torch.minimum(u, v),
        "Floor": lambda v, **a: torch.floor(v),
        "Relu": lambda v, **a: torch.relu(v),
        "Equal": lambda u, v, **a: u == v,
        "Where": lambda c, u, v, **a: torch.where(c, u, v),
        # a layer of its own in an engine: the permuted tensor is written out, not left as a view
        "Transpose": lambda v, **a: v.permute(*a["perm"]).contiguous(),
        "Expand": lambda v, **a: expand(v, a["shape"]),
        "Pad": pad,
        "Slice": slice_,
        "ReduceSum": reduce_sum,
        "GridSample": lambda v, g, **a: F.grid_sample(v, g, mode="bilinear", padding_mode="zeros",
                                                       align_corners=bool(a.get("align_corners", 0))),
        "Conv": conv,
        "Gemm": gemm,
    }
    nodes = []
    for nd in model.graph.node:
        attrs = {x.name: helper.get_attribute_value(x) for x in nd.attribute}
        ins = list(nd.input)
        if nd.op_type in ("Reshape", "Expand"):  # shapes, pads and axes stay on the host
            attrs["shape"] = [int(d) for d in host[ins.pop()]]
        elif nd.op_type == "Slice":
            attrs.update(zip(("starts", "ends", "axes", "steps"), ([int(d) for d in host[i]] for i in ins[1:])))
            ins = ins[:1]
        elif nd.op_type in ("Pad", "ReduceSum"):
            attrs["pads" if nd.op_type == "Pad" else "axes"] = [int(d) for d in host[ins[1]]]
            ins = ins[:1]
        nodes.append((ops[nd.op_type], ins, nd.output[0], attrs, nd.op_type))
    if fixed:  # nodes that read only initializers and the layer's weights: computed once, as a builder folds them
        known = set(consts) | set(fixed)
        consts.update(fixed)
        rest = []
        for nd in nodes:
            op, ins, outs, attrs, _ = nd
            if all(i in known for i in ins if i):
                consts[outs] = op(*(consts[i] for i in ins if i), **attrs)
                known.add(outs)
            else:
                rest.append(nd)
        nodes = rest
    steps = _compiled_segments(torch, nodes, {o.name for o in model.graph.output}, alone) if fuse else nodes

    def fn(feeds: dict[str, Any], until: tuple[str, ...] = ()) -> dict[str, Any]:
        env = {**consts, **feeds}
        for op, ins, outs, attrs, kind in steps:
            if kind in until:
                break
            got = op(*(env[i] for i in ins if i), **attrs)
            if isinstance(outs, str):
                env[outs] = got
            else:
                env.update(zip(outs, got))
        return env

    return fn


# Nodes that stay their own PyTorch op (a library kernel) when the rest is fused: the product,
# and GridSample (Inductor's own GridSample, decomposed per channel, ran 1.2-1.8x slower than
# PyTorch's kernel plus the fused rest). TensorRT-RTX 1.7's builder fuses everything but the
# product into generated kernels (its engine's layer listing, DETAILED profiling verbosity:
# the corner Gather with the index arithmetic and the blend in one kernel; GridSample with its
# casts and the mask multiply in one), so the proxy fuses the Gather too.
HEAVY = ("GridSample", "Conv", "Gemm")


def _compiled_segments(torch: Any, nodes: list[Any], graph_outputs: set[str], alone: tuple[str, ...] = ()) -> list[Any]:
    """``nodes`` with every run of nodes other than Conv and Gemm (and the nodes writing the
    tensors named in ``alone``) replaced by one ``torch.compile``d step:
    ``(fn, inputs, outputs, {}, "Fused")``."""
    # every segment shares one code object: without this, Dynamo stops recompiling after 8 of them
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 4096)
    steps: list[Any] = []
    run: list[Any] = []
    sampler = next((nd[2] for nd in nodes if nd[4] == "Gather" and nd[2].endswith("/sample")), None)

    def close() -> None:
        if not run:
            return
        made = {o for _, _, o, _, _ in run}
        ins = list(dict.fromkeys(i for _, nin, _, _, _ in run for i in nin if i and i not in made))
        # what nodes outside the segment read: the segment's other tensors stay inside its kernels
        later = {i for _, nin, o, _, _ in nodes if o not in made for i in nin} | graph_outputs
        outs = [o for _, _, o, _, _ in run if o in later]
        body = list(run)

        def segment(*args: Any, body: list[Any] = body, ins: list[str] = ins, outs: list[str] = outs) -> Any:
            env = dict(zip(ins, args))
            for op, nin, o, attrs, _ in body:
                env[o] = op(*(env[i] for i in nin if i), **attrs)
            return tuple(env[o] for o in outs)

        steps.append((torch.compile(segment, fullgraph=True, dynamic=False), ins, outs, {}, "Fused"))
        run.clear()

    for nd in nodes:
        if nd[4] == "Gather" and nd[2] == sampler:  # the corner indices and weights written once, not per channel
            close()
        if nd[4] in HEAVY or nd[2] in alone:
            close()
            steps.append(nd)
        else:
            run.append(nd)
    close()
    return steps


def graphed(torch: Any, fn: Any) -> Any:
    """``fn`` captured once in a CUDA graph; returns a replay function."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def portable_timings(torch: Any, F: Any, deform_conv2d: Any, tensors: tuple[Any, ...], fp16: bool, iters: int,
                     reps: int, stride: int = 1, model: Any = None) -> dict[str, Any]:
    """The portable form of one layer: whole (each node alone; with the nodes around the library
    kernels compiled into fused kernels, as TensorRT fuses such layers; and fused but with the
    sampling node, the corner Gather or GridSample, left alone), its sampling part (every node
    before the product), the product (Gemm or 1x1 Conv) alone, the sampling node alone, and the
    errors against float64 torchvision. A failure is reported, not fatal."""
    x, w, b, off, msk = tensors
    n, c, h = x.shape[0], x.shape[1], x.shape[2]
    try:
        model = model or portable_graph(n, c, w.shape[0], h, fp16, stride)
        product = next(nd for nd in model.graph.node if nd.op_type in ("Conv", "Gemm"))
        sampler = next(nd for nd in model.graph.node
                       if nd.op_type == "GridSample" or (nd.op_type == "Gather" and nd.name.endswith("/sample")))
        y = model.graph.output[0].name
        feeds = {"x": x, "offset": off, "mask": msk, "weight": w, "bias": b}
        layer = {"weight": w, "bias": b}  # the layer's constants in a real model
        run = torch_runner(torch, model, fixed=layer)
        run_fused = torch_runner(torch, model, fuse=True, fixed=layer)
        run_split = torch_runner(torch, model, fuse=True, alone=(sampler.output[0],), fixed=layer)
        whole = time_us(torch, graphed(torch, lambda: run(feeds)[y]), iters, reps)
        fused = time_us(torch, graphed(torch, lambda: run_fused(feeds)[y]), iters, reps)
        split = time_us(torch, graphed(torch, lambda: run_split(feeds)[y]), iters, reps)
        sample = time_us(torch, graphed(torch, lambda: run(feeds, ("Conv", "Gemm"))), iters, reps)
        env = run(feeds)
        p_ins = [env[i] for i in product.input if i]
        if product.op_type == "Conv":
            dense = time_us(torch, graphed(torch, lambda: F.conv2d(p_ins[0], p_ins[1], b)), iters, reps)
        else:
            dense = time_us(torch, graphed(torch, lambda: torch.addmm(p_ins[2], p_ins[0], p_ins[1])), iters, reps)
        s_ins = [env[i] for i in sampler.input]
        if sampler.op_type == "GridSample":
            def one() -> Any:
                return F.grid_sample(s_ins[0], s_ins[1], padding_mode="zeros", align_corners=False)
        else:
            flat = s_ins[1].reshape(-1).long()

            def one() -> Any:
                return torch.index_select(s_ins[0], 0, flat)
        sampler_alone = time_us(torch, graphed(torch, one), iters, reps)
        ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), stride=stride, padding=1,
                            mask=msk.double())

        def err(out: Any) -> float:
            return float((out.double() - ref).norm() / ref.norm())

        return dict(portable_us=whole, portable_fused_us=fused, portable_fused_split_us=split,
                    portable_sample_us=sample, portable_conv_us=dense, portable_sampler_us=sampler_alone,
                    portable_sampler=sampler.op_type,
                    err_portable=err(env[y]), err_portable_fused=err(run_fused(feeds)[y]),
                    err_portable_split=err(run_split(feeds)[y]),
                    portable_nodes=[nd.op_type for nd in model.graph.node])
    except Exception as exc:  # keep the plugin's numbers when the portable part fails
        print(f"# portable form failed: {type(exc).__name__}: {exc}", flush=True)
        return dict(portable_error=f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all numbers here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--graphs", help="portable graphs written by plugins/dcnv2/devportable.py write (one per shape "
                    "and type), instead of running the rewrite here")
    ap.add_argument("--plugin-only", action="store_true",
                    help="skip the plugin-free form (its torch.compile step is most of the run time)")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torchvision.ops import deform_conv2d

    from trtconv.trt.plugins import dcnv2_kernel as dk

    iters, reps = (5, 5) if args.quick else (20, 15)
    prop = torch.cuda.get_device_properties(0)
    gpu = "H200" if "H200" in prop.name else "H100"
    print(f"# {prop.name}, {prop.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
    torch.backends.cudnn.benchmark = True
    launch = dk.CupyLauncher()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []

    for key, (n, c, cout, h, stride, modes) in SHAPES.items():
        ho = out_size(h, stride)
        for mode in modes:
            dtype = torch.float16 if mode == "fp16" else torch.float32
            tf32 = mode == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32

            x, w, b, off, msk = layer_inputs(torch, gen, n, c, cout, h, stride, dtype)
            w_ohwi = w.permute(0, 2, 3, 1).contiguous()
            attrs = dk.DCNv2Attrs(stride=(stride, stride), pads=(1, 1, 1, 1), allow_tf32=mode != "fp32")
            out = torch.empty(n, cout, ho, ho, dtype=dtype, device="cuda")

            x_cl = x.permute(0, 2, 3, 1).contiguous()  # what TensorRT's HWC8/HWC format holds
            tiles: dict[str, float] = {}
            for layout in dk.LAYOUTS:
                xin = x_cl if layout == "nhwc" else x
                # Every tile TensorRT would time on this GPU (the wgmma ones on compute capability 9.0).
                for tile in dk.usable_tiles(torch.cuda.get_device_capability(), accurate_fp32=mode == "fp32"):
                    if tile[1] >= 128 and cout <= 64:
                        continue
                    run, _ = launch.prepare(xin, off, msk, w_ohwi, b, attrs, out=out, tile=tile, layout=layout)
                    tiles[f"{layout} {tile[0]}x{tile[1]}x{tile[2]}x{tile[3]}"] = time_us(torch, run, iters, reps)
            best = {lay: min((k for k in tiles if k.startswith(lay)), key=tiles.__getitem__) for lay in dk.LAYOUTS}

            def tv_run(x=x, off=off, w=w, b=b, msk=msk, s=stride):
                return deform_conv2d(x, off, w, b, stride=s, padding=1, mask=msk)

            t_tv = time_us(torch, tv_run, iters, reps)
            t_conv = dense_conv_us(torch, gen, n, c, cout, h, stride, dtype, iters, reps)
            t_reformat = time_us(torch, lambda x=x: x.permute(0, 2, 3, 1).contiguous(), iters, reps)
            model = None
            if args.graphs and not args.plugin_only:
                import onnx

                model = onnx.load(next(Path(args.graphs).glob(f"{key}_{'f16' if mode == 'fp16' else 'f32'}_*.onnx")))
            port_row = {} if args.plugin_only else portable_timings(
                torch, F, deform_conv2d, (x, w, b, off, msk), mode == "fp16", iters, reps, stride, model)

            ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), stride=stride, padding=1,
                                mask=msk.double())
            tv = tv_run()
            errs = {}
            for layout in dk.LAYOUTS:
                tile = tuple(int(v) for v in best[layout].split()[1].split("x"))
                out.fill_(float("nan"))
                ours = launch(x_cl if layout == "nhwc" else x, off, msk, w_ohwi, b, attrs, out=out, tile=tile, layout=layout)
                errs[layout] = float((ours.double() - ref).norm() / ref.norm())
            e_tv = float((tv.double() - ref).norm() / ref.norm())
            row = dict(
                gpu=prop.name, shape=key, n=n, c=c, cout=cout, h=h, stride=stride, mode=mode,
                ours_nchw_us=tiles[best["nchw"]], ours_nhwc_us=tiles[best["nhwc"]],
                tile_nchw=best["nchw"], tile_nhwc=best["nhwc"], tiles_us=tiles, torchvision_us=t_tv,
                cudnn_nchw_us=t_conv["nchw"], cudnn_nhwc_us=t_conv["nhwc"], cudnn_best_us=min(t_conv.values()),
                reformat_us=t_reformat, roofline_us=roofline_us(n, c, cout, h, stride, mode, gpu),
                err_nchw=errs["nchw"], err_nhwc=errs["nhwc"], err_torchvision=e_tv,
                columns_mib=n * c * 9 * ho * ho * (2 if mode == "fp16" else 4) / 2**20, **port_row,
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
            del x, x_cl, w, b, off, msk, w_ohwi, out, ref, ours, tv
            torch.cuda.empty_cache()

    # FP16 error against H (sampling coordinates in FP32 vs torchvision's half coordinates).
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    sweep = []
    for h in (16, 32, 64, 128, 256):
        x = torch.randn(1, 64, h, h, generator=gen, device="cuda").half()
        w = (torch.randn(64, 64, 3, 3, generator=gen, device="cuda") / 24).half()
        b = torch.randn(64, generator=gen, device="cuda").half()
        off = (2 * torch.randn(1, 18, h, h, generator=gen, device="cuda")).half()
        msk = torch.sigmoid(torch.randn(1, 9, h, h, generator=gen, device="cuda")).half()
        ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), padding=1, mask=msk.double())
        ours = launch(x, off, msk, w.permute(0, 2, 3, 1).contiguous(), b, dk.DCNv2Attrs(pads=(1, 1, 1, 1)))
        tv = deform_conv2d(x, off, w, b, padding=1, mask=msk)
        sweep.append(dict(h=h, err_ours=float((ours.double() - ref).norm() / ref.norm()),
                          err_torchvision=float((tv.double() - ref).norm() / ref.norm())))

    print(f"\n## DCNv2 forward on {prop.name}: median µs (CUDA events)")
    print("Layout of x per column: NCHW = TensorRT LINEAR; NHWC = channels-last (TensorRT HWC8/HWC); "
          "`+ref` = a separate NCHW->NHWC copy added. cuDNN = torch conv2d, each layout on fresh tensors. "
          "ours / best cuDNN = the faster plugin layout / the faster cuDNN layout; ×tv = torchvision (NCHW) / ours NHWC.")
    print("| shape | mode | ours NCHW | ours NHWC | NHWC+ref | torchvision NCHW | cuDNN NCHW | cuDNN NHWC "
          "| roofline | ×tv | ours / best cuDNN | err ours | err tv |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours = min(r["ours_nchw_us"], r["ours_nhwc_us"])
        stride_note = f" s{r['stride']}" if r["stride"] != 1 else ""
        print(
            f"| ({r['shape']}) N{r['n']} C{r['c']}→{r['cout']} {r['h']}²{stride_note} | {r['mode']} "
            f"| {r['ours_nchw_us']:.1f} | {r['ours_nhwc_us']:.1f} | {r['ours_nhwc_us'] + r['reformat_us']:.1f} "
            f"| {r['torchvision_us']:.1f} | {r['cudnn_nchw_us']:.1f} | {r['cudnn_nhwc_us']:.1f} "
            f"| {r['roofline_us']:.1f} | {r['torchvision_us'] / r['ours_nhwc_us']:.2f} "
            f"| {ours / r['cudnn_best_us']:.2f} "
            f"| {max(r['err_nchw'], r['err_nhwc']):.1e} | {r['err_torchvision']:.1e} |"
        )
    print("\n## Both forms against cuDNN, torchvision and the roofline: median µs")
    print("plugin = its faster layout (channels-last; +reformat adds an NCHW->NHWC copy, what TensorRT inserts "
          "after an NCHW producer); portable = the plugin-free ONNX graph, every node alone; fused = the same with "
          "every node but the product compiled into fused kernels (torch.compile), as TensorRT-RTX's builder fuses "
          "them; cuDNN = dense 3x3 conv, faster layout; errors: relative L2 against float64.")
    print("| shape | mode | plugin | +reformat | portable | fused | torchvision | cuDNN | roofline "
          "| plugin / cuDNN | portable / plugin | fused / plugin | tv / plugin | err plugin | err portable | err tv |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        plugin = min(r["ours_nchw_us"], r["ours_nhwc_us"])
        stride_note = f" s{r['stride']}" if r["stride"] != 1 else ""
        port = ("| {portable_us:.1f} | {portable_fused_us:.1f} ".format(**r) if "portable_us" in r else "| – | – ")
        ratios = (f"| {r['portable_us'] / plugin:.2f} | {r['portable_fused_us'] / plugin:.2f} "
                  if "portable_us" in r else "| – | – ")
        print(
            f"| ({r['shape']}) N{r['n']} C{r['c']}→{r['cout']} {r['h']}²{stride_note} | {r['mode']} | {plugin:.1f} "
            f"| {r['ours_nhwc_us'] + r['reformat_us']:.1f} {port}| {r['torchvision_us']:.1f} "
            f"| {r['cudnn_best_us']:.1f} | {r['roofline_us']:.1f} | {plugin / r['cudnn_best_us']:.2f} {ratios}"
            f"| {r['torchvision_us'] / plugin:.2f} | {max(r['err_nchw'], r['err_nhwc']):.1e} "
            f"| {max(r.get('err_portable', float('nan')), r.get('err_portable_fused', float('nan'))):.1e} "
            f"| {r['err_torchvision']:.1e} |"
        )
    print("\nportable, where its time goes: node by node and fused as above; fused, sampler alone = fused but "
          "the sampling node (the corner Gather) left as its own PyTorch op, as if the runtime did not fuse it; "
          "sampling = every node before the product, node by node; then the sampling node alone and the product "
          "(Gemm) alone; columns MiB = the im2col buffer in the model's type (the corner Gather alone writes four "
          "times that)")
    print("| shape | mode | portable | fused | fused, sampler alone | sampling | sampler alone | product alone "
          "| columns MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in (r for r in rows if "portable_us" in r):
        print(f"| ({r['shape']}) | {r['mode']} | {r['portable_us']:.1f} | {r['portable_fused_us']:.1f} "
              f"| {r['portable_fused_split_us']:.1f} | {r['portable_sample_us']:.1f} "
              f"| {r['portable_sampler_us']:.1f} | {r['portable_conv_us']:.1f} | {r['columns_mib']:.0f} |")
    print("portable nodes: " + "; ".join(sorted({" ".join(r.get("portable_nodes", ["failed"])) for r in rows})))
    print("\nbest tiles: " + "; ".join(f"({r['shape']}) {r['mode']}: {r['tile_nchw']}, {r['tile_nhwc']}" for r in rows))
    print("\n| H=W (FP16, C64→64) | " + " | ".join(str(s["h"]) for s in sweep) + " |")
    print("|---|" + "---|" * len(sweep))
    print("| ours | " + " | ".join(f"{s['err_ours']:.1e}" for s in sweep) + " |")
    print("| torchvision | " + " | ".join(f"{s['err_torchvision']:.1e}" for s in sweep) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": prop.name, "rows": rows, "fp16_error_sweep": sweep}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
