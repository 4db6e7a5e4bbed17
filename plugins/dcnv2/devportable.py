"""Variants of the plugin-free (portable) DCN form side by side, for one device call.

    python plugins/dcnv2/devportable.py write DIR [--label L] [--channels N ...]   # CPU: graphs
    python plugins/dcnv2/devportable.py time DIR [--json out.json] [--quick]       # GPU: timings

``write`` saves, for every shape of benchmarks/dcn_bench.py, the portable ONNX graph that the
trtconv on ``PYTHONPATH`` emits (proven in ONNX Runtime, shape-only parts folded), once per
``SAMPLE_CHANNELS`` value given (``0``: no channel split; none given: the module's own), as
``KEY_f16|f32_LABEL[-cN][-FORM].onnx`` (``--forms``: values of a ``portable.FORM`` switch, where a
development version has one); run it once per trtconv version to compare (e.g. ``--label main``
with the main checkout first on the path). ``time`` runs every graph in DIR on the GPU through
dcn_bench's PyTorch proxy (each node alone; fused; fused with the sampling node alone),
checks it against float64 torchvision, and prints one table; the device needs no
onnx-graphsurgeon or ONNX Runtime for it (``dcn_bench.py --graphs DIR`` likewise takes them
for the full benchmark).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import dcn_bench as bench  # noqa: E402


def write(out: Path, label: str, channels: list[int], forms: list[str]) -> None:
    import onnx

    out.mkdir(parents=True, exist_ok=True)
    try:
        from trtconv.rewrites.dcn import portable
    except ImportError:
        portable = None
    for key, (n, c, cout, h, stride, modes) in bench.SHAPES.items():
        for fp16, ch, form in ((f, ch, fm) for f in sorted({m == "fp16" for m in modes}, reverse=True)
                               for ch in channels or [None] for fm in forms or [None]):
            name = (f"{label}-c{ch}" if ch is not None else label) + (f"-{form}" if form else "")
            if form is not None and portable is not None and hasattr(portable, "FORM"):
                portable.FORM = form
            if ch is not None and portable is not None and hasattr(portable, "SAMPLE_CHANNELS"):
                portable.SAMPLE_CHANNELS = ch or 1 << 30
            model = bench.portable_graph(n, c, cout, h, fp16, stride)
            onnx.save(model, out / f"{key}_{'f16' if fp16 else 'f32'}_{name}.onnx")
            print(key, fp16, name, flush=True)


def time_all(graphs: Path, json_out: str | None, quick: bool, modes: list[str]) -> None:
    import onnx
    import torch
    import torch.nn.functional as F
    from torchvision.ops import deform_conv2d

    iters, reps = (10, 7) if quick else (20, 15)
    prop = torch.cuda.get_device_properties(0)
    print(f"# {prop.name}, torch {torch.__version__}", flush=True)
    torch.backends.cudnn.benchmark = True
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for key, (n, c, cout, h, stride, shape_modes) in bench.SHAPES.items():
        for mode in (m for m in shape_modes if m in modes):
            dtype = torch.float16 if mode == "fp16" else torch.float32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
            tensors = bench.layer_inputs(torch, gen, n, c, cout, h, stride, dtype)
            for path in sorted(graphs.glob(f"{key}_{'f16' if mode == 'fp16' else 'f32'}_*.onnx")):
                model = onnx.load(path)
                r = bench.portable_timings(torch, F, deform_conv2d, tensors, mode == "fp16", iters, reps, stride,
                                           model=model)
                r.pop("portable_nodes", None)
                row = dict(shape=key, mode=mode, variant=path.stem.split("_", 2)[2], **r)
                rows.append(row)
                print(json.dumps(row), flush=True)
            del tensors
            torch.cuda.empty_cache()
    print(f"\n## portable variants on {prop.name}: median µs")
    print("| shape | mode | variant | portable | fused | fused, sampler alone | sampling | sampler | product "
          "| err | err fused |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "portable_us" not in r:
            print(f"| ({r['shape']}) | {r['mode']} | {r['variant']} | failed: {r.get('portable_error')} |")
            continue
        print(f"| ({r['shape']}) | {r['mode']} | {r['variant']} | {r['portable_us']:.1f} | {r['portable_fused_us']:.1f} "
              f"| {r['portable_fused_split_us']:.1f} | {r['portable_sample_us']:.1f} | {r['portable_sampler_us']:.1f} | {r['portable_conv_us']:.1f} "
              f"| {r['err_portable']:.1e} "
              f"| {r['err_portable_fused']:.1e} |")
    if json_out:
        Path(json_out).write_text(json.dumps({"device": prop.name, "rows": rows}, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir", type=Path)
    w.add_argument("--label", default="branch")
    w.add_argument("--channels", type=int, nargs="+", help="SAMPLE_CHANNELS values (0: no split); default: the module's")
    w.add_argument("--forms", nargs="+", help="portable.FORM values to write, where the module has that switch")
    t = sub.add_parser("time")
    t.add_argument("dir", type=Path)
    t.add_argument("--json")
    t.add_argument("--quick", action="store_true", help="10 launches x 7 batches instead of 20 x 15")
    t.add_argument("--modes", nargs="+", default=list(bench.ALL_MODES))
    args = ap.parse_args()
    if args.cmd == "write":
        write(args.dir, args.label, args.channels, args.forms)
    else:
        time_all(args.dir, args.json, args.quick, args.modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
