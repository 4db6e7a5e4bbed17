"""Launch the DCNv2 kernel once per listed config, for Nsight Compute (plugins/dcnv2/NOTES.md)."""

import sys

import torch

from trtconv.trt.plugins import dcnv2_kernel as dk

CONFIGS = [("float16", (64, 128, 32, 0)), ("float32", (64, 128, 32, 0))]
if len(sys.argv) > 1:  # e.g. float16:64,64,64,2
    CONFIGS = [(a.split(":")[0], tuple(int(v) for v in a.split(":")[1].split(","))) for a in sys.argv[1:]]


def main() -> int:
    gen = torch.Generator(device="cuda").manual_seed(0)
    launch = dk.CupyLauncher()
    n, c, cout, h = 8, 256, 256, 64
    for dtype_name, tile in CONFIGS:
        dt = getattr(torch, dtype_name)
        x = torch.randn(n, h, h, c, generator=gen, device="cuda").to(dt)
        w = (torch.randn(cout, 3, 3, c, generator=gen, device="cuda") / 48).to(dt)
        b = torch.randn(cout, generator=gen, device="cuda").to(dt)
        off = (2 * torch.randn(n, 18, h, h, generator=gen, device="cuda")).to(dt)
        msk = torch.sigmoid(torch.randn(n, 9, h, h, generator=gen, device="cuda")).to(dt)
        launch(x, off, msk, w, b, dk.DCNv2Attrs(pads=(1, 1, 1, 1)), tile=tile, layout="nhwc")
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
