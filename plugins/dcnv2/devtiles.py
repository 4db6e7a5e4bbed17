"""Development only: every compiled channels-last tile of the Hopper kernel on every benchmark shape.

Loads sm_90a cubins compiled here (ptxas, one per entry point, so the device spends no time
compiling), checks each tile's output against float64 torchvision on fresh inputs (output
poisoned first) and times the tiles interleaved over a few rounds, so clock drift hits them
alike. Tiles are read off the entry names (dcnv2_<dt>_nhwc_m<BM>n<BN>k<K><w|v>[KS][x<G>][z|y][_abl<N>]):

  python3 plugins/dcnv2/devtiles.py --cubins .dcnk/cubin a:fp16 b:fp16 e:fp16 f:fp16 b:tf32

Also times the shipped compute_80 tiles (their PTX, through the usual launcher) with --c80.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from dcn_bench import SHAPES, layer_inputs, out_size, time_us  # noqa: E402
from torchvision.ops import deform_conv2d  # noqa: E402

from trtconv.trt.plugins import dcnv2_kernel as dk  # noqa: E402

NAME = re.compile(r"dcnv2_(f16|bf16|tf32)_nhwc_m(\d+)n(\d+)k(\d+)([wv])(\d*)(x\d+)?([zy])?(_abl\d)?$")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubins", required=True, help="folder of <entry>.cubin files")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--c80", action="store_true", help="also the compute_80 tiles")
    ap.add_argument("configs", nargs="+", help="shape:mode, e.g. b:fp16")
    args = ap.parse_args()
    import cupy

    launcher = dk.CupyLauncher()
    cubins = sorted(Path(args.cubins).glob("*.cubin"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    summary = []
    for cfg in args.configs:
        shape, mode = cfg.split(":")
        n, c, cout, h, stride, _ = SHAPES[shape]
        ho = out_size(h, stride)
        dtype = torch.float16 if mode == "fp16" else torch.float32
        stem = "f16" if mode == "fp16" else "tf32"
        x, w, b, off, msk = layer_inputs(torch, gen, n, c, cout, h, stride, dtype)
        ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), stride=stride, padding=1,
                            mask=msk.double())
        x_cl = x.permute(0, 2, 3, 1).contiguous()
        w_ohwi = w.permute(0, 2, 3, 1).contiguous()
        attrs = dk.DCNv2Attrs(stride=(stride, stride), pads=(1, 1, 1, 1))
        out = torch.empty(n, cout, ho, ho, dtype=dtype, device="cuda")
        ints = [np.int32(v) for v in dk.scalar_args(n, c, h, h, cout, ho, ho, 3, 3, attrs, c)]
        kargs = (*(launcher._as_cupy(t) for t in (x_cl, off, msk, w_ohwi, b)), *ints, launcher._as_cupy(out))
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        m = n * ho * ho
        runs = {}
        for path in cubins:
            hit = NAME.match(path.stem)
            if not hit or hit.group(1) != stem:
                continue
            bm, bn, ks = int(hit.group(2)), int(hit.group(3)), int(hit.group(6) or 1)
            if bn > max(cout, 64) or (bn == 64 and cout > 128):
                continue
            fn = cupy.RawModule(path=str(path)).get_function(path.stem)
            blocks = ((m + bm - 1) // bm * ks, -(-cout // bn), 1)
            nthreads = 2 * bm * (2 if hit.group(5) == "v" else 1)

            def run(fn=fn, blocks=blocks, nthreads=nthreads, kargs=kargs, stream=stream) -> None:
                with stream:
                    fn(blocks, (nthreads,), kargs)

            runs[path.stem.split("_nhwc_")[1]] = run
        if args.c80 and mode != "fp32":
            for tile in dk.TILES:
                r, _ = launcher.prepare(x_cl, off, msk, w_ohwi, b, attrs, out=out, tile=tile, layout="nhwc")
                runs["c80_" + dk.tile_id(tile)] = r
        errs, times = {}, {k: [] for k in runs}
        for k, run in runs.items():
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            errs[k] = float((out.double() - ref).norm() / ref.norm())
        for _ in range(args.rounds):
            for k, run in runs.items():
                times[k].append(time_us(torch, run, 20, 7))
        order = sorted(runs, key=lambda k: min(times[k]))
        for k in order:
            print(f"| {cfg} | {k} | {min(times[k]):.1f} | {' '.join(f'{t:.1f}' for t in times[k])} | {errs[k]:.1e} |",
                  flush=True)
        summary.append(f"| {cfg} | {order[0]} | {min(times[order[0]]):.1f} | {errs[order[0]]:.1e} |")
        del x, x_cl, w, w_ohwi, b, off, msk, ref, out, kargs
        torch.cuda.empty_cache()
    print("\n| config | best tile | µs | err |\n|---|---|---|---|")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
