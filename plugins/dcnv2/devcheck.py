"""One device call for kernel development: correctness of chosen tiles on every test case,
then per-tile timings (both layouts) on the three benchmark shapes against torchvision and
cuDNN. Prints a short table last. Usage: python3 plugins/dcnv2/devcheck.py [--tiles 7,8] [--modes fp16,tf32]
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import test_dcnv2_gpu as T  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dcn_bench import SHAPES, layer_inputs, out_size, time_us  # noqa: E402
from torchvision.ops import deform_conv2d  # noqa: E402

from trtconv.trt.plugins import dcnv2_kernel as dk  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-tiles", default="", help="1-based tile indices checked on every case")
    ap.add_argument("--modes", default="fp16,tf32")
    ap.add_argument("--shapes", default="a,b,c")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--only-w", action="store_true", help="time only the wgmma tiles in NCHW")
    ap.add_argument("--sm90-only", action="store_true", help="time only the wgmma tiles")
    ap.add_argument("--layouts", default=",".join(dk.LAYOUTS))
    args = ap.parse_args()
    launcher = dk.CupyLauncher()
    bad = 0
    for ti in [int(v) for v in args.check_tiles.split(",") if v]:
        tile = dk.ALL_TILES[ti - 1]
        worst: dict[str, float] = {}
        for name, case in sorted(T.CASES.items()):
            for mode, dtn, tf32 in T.MODES:
                if tile in dk.SM90_TILES and mode == "f32":
                    continue
                for layout in dk.LAYOUTS:
                    inputs = T._inputs(case, getattr(torch, dtn), seed=zlib.crc32(f"{name}/{mode}/{layout}/d".encode()))
                    out = T.run_kernel(launcher, case, inputs, tf32, tile=tile, layout=layout)
                    nan = bool(torch.isnan(out).any())
                    err = T.rel_err(out, T.reference(case, *inputs))
                    if nan or not err <= T.LIMITS[mode]:
                        bad += 1
                        print(f"FAIL tile {tile} {name} {mode} {layout}: err {err:.2e} nan {nan}", flush=True)
                    worst[mode] = max(worst.get(mode, 0.0), err)
        print(f"check tile {tile}: worst errors " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()), flush=True)

    cc = torch.cuda.get_device_capability()
    gen = torch.Generator(device="cuda").manual_seed(0)
    torch.backends.cudnn.benchmark = True
    lines = []
    for key in args.shapes.split(","):
        n, c, cout, h, stride, _ = SHAPES[key]
        ho = out_size(h, stride)
        for mode in args.modes.split(","):
            dtype = torch.float16 if mode == "fp16" else torch.float32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"

            x, w, b, off, msk = layer_inputs(torch, gen, n, c, cout, h, stride, dtype)
            w_ohwi = w.permute(0, 2, 3, 1).contiguous()
            x_cl = x.permute(0, 2, 3, 1).contiguous()
            attrs = dk.DCNv2Attrs(stride=(stride, stride), pads=(1, 1, 1, 1), allow_tf32=mode != "fp32")
            out = torch.empty(n, cout, ho, ho, dtype=dtype, device="cuda")
            ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), stride=stride, padding=1,
                                mask=msk.double())
            t_tv = time_us(torch, lambda x=x, off=off, w=w, b=b, msk=msk, s=stride: deform_conv2d(
                x, off, w, b, stride=s, padding=1, mask=msk), args.iters, args.reps)
            t_cv = time_us(torch, lambda x=x, w=w, b=b, s=stride: F.conv2d(x, w, b, stride=s, padding=1), args.iters, args.reps)
            res = []
            for layout in args.layouts.split(","):
                for tile in dk.usable_tiles(cc, accurate_fp32=mode == "fp32"):
                    if args.sm90_only and tile not in dk.SM90_TILES:
                        continue
                    if tile[1] >= 128 and cout <= 64 or args.only_w and tile not in dk.SM90_TILES and layout == "nchw":
                        continue
                    xin = x_cl if layout == "nhwc" else x
                    run, _ = launcher.prepare(xin, off, msk, w_ohwi, b, attrs, out=out, tile=tile, layout=layout)
                    out.fill_(float("nan"))
                    run()
                    err = float((out.double() - ref).norm() / ref.norm())
                    t = time_us(torch, run, args.iters, args.reps)
                    res.append((t, layout, tile, err))
            res.sort(key=lambda r: r[0])
            for layout in dk.LAYOUTS:
                if not any(r[1] == layout for r in res):
                    continue
                best = min(r for r in res if r[1] == layout)
                lines.append(
                    f"| ({key}) | {mode} | {layout} | {best[0]:.1f} {best[2]} err {best[3]:.1e} "
                    f"| {t_tv:.1f} | {t_cv:.1f} | {t_tv / best[0]:.2f} |"
                )
            print(f"({key}) {mode}: " + "; ".join(f"{r[1]} {r[2]} {r[0]:.1f} e{r[3]:.0e}" for r in res), flush=True)
            del x, x_cl, w, b, off, msk, w_ohwi, out, ref
            torch.cuda.empty_cache()
    print(f"\nfailures: {bad}")
    print("| shape | mode | layout | best µs, tile | torchvision | cuDNN | ×tv |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
