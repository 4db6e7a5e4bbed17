"""Development only: builds of the Hopper kernel side by side (one device call per idea).

Each variant is a compute_90a PTX file built from some version of dcnv2_sm90.cu (with
-DDCNV2_DEV for the development entries). For every config the script checks each variant's
output against float64 torchvision and times the variants interleaved (A B A B ...), so
clock drift hits them alike:

  python3 plugins/dcnv2/devvar.py --var v13=.dev/v13.ptx --var new=.dev/new.ptx \\
      b:fp16:m128n256k64v b:tf32:m128n256k64v c:fp16:m64n256k64v7

A config is shape (a, b, c of benchmarks/dcn_bench.py) : mode (fp16, tf32) : tile (a shipped
tile's suffix, or BM,BN,KCH,variant for a development tile launched like a compute_80 one:
256 threads, no split-K), and optionally the entry to run after a fourth colon:
b:fp16:m128n256k64v:dcnv2_to_f16_v or b:fp16:64,256,64,5:dcnv2_dev_f16_m64v.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from dcn_bench import SHAPES, layer_inputs, time_us  # noqa: E402
from torchvision.ops import deform_conv2d  # noqa: E402

from trtconv.trt.plugins import dcnv2_kernel as dk  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--var", action="append", required=True, help="label=path of a PTX build")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per variant")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    texts = {}
    for v in args.var:
        label, path = v.split("=", 1)
        texts[label] = Path(path).read_text(encoding="ascii")

    def source(key: str) -> tuple[str, str]:  # "label/entry name" -> that build's entry
        label, name = key.split("/", 1)
        return name, dk.single_entry(texts[label], name, key)

    launcher = dk.CupyLauncher(source)
    tiles = {dk.tile_id(t): t for t in dk.SM90_TILES}
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for cfg in args.configs:
        shape, mode, tname, *entry = cfg.split(":")
        tile = tiles[tname] if tname in tiles else tuple(int(v) for v in tname.split(","))  # a development tile
        n, c, cout, h, stride, _ = SHAPES[shape]
        dtype = torch.float16 if mode == "fp16" else torch.float32
        x, w, b, off, msk = layer_inputs(torch, gen, n, c, cout, h, stride, dtype)
        ref = deform_conv2d(x.double(), off.double(), w.double(), b.double(), stride=stride, padding=1,
                            mask=msk.double())
        x_cl = x.permute(0, 2, 3, 1).contiguous()
        w_ohwi = w.permute(0, 2, 3, 1).contiguous()
        attrs = dk.DCNv2Attrs(stride=(stride, stride), pads=(1, 1, 1, 1))
        name = entry[0] if entry else dk.kernel_name(str(dtype).removeprefix("torch."), tile, True, "nhwc")
        runs = {}
        for label in texts:
            try:
                run, out = launcher.prepare(x_cl, off, msk, w_ohwi, b, attrs, tile=tile, layout="nhwc", entry=f"{label}/{name}")
            except ValueError as exc:  # this build has no such entry
                print(f"{cfg} {label}: {exc}", flush=True)
                continue
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = float((out.double() - ref).norm() / ref.norm())
            runs[label] = (run, err, [])
        for _ in range(args.rounds):
            for run, _, ts in runs.values():
                ts.append(time_us(torch, run, 20, 5))
        for label, (_, err, ts) in runs.items():
            rows.append(f"| {cfg} | {label} | {min(ts):.1f} | {' '.join(f'{t:.1f}' for t in ts)} | {err:.1e} |")
            print(rows[-1], flush=True)
        del x, x_cl, w, w_ohwi, b, off, msk, ref
        torch.cuda.empty_cache()
    print("\n| config | variant | best µs | rounds | err |\n|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
