"""Launch the DCNv2 kernel once per listed config, for Nsight Compute (plugins/dcnv2/NOTES.md).
Config "dtype:BM,BN,KCH,variant[:shape]", shape a, b or c of benchmarks/dcn_bench.py (default b)."""

import sys
from pathlib import Path

import torch

from trtconv.trt.plugins import dcnv2_kernel as dk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from dcn_bench import SHAPES  # noqa: E402

CONFIGS = [("float16", (64, 128, 32, 0), "b"), ("float32", (64, 128, 32, 0), "b")]
if len(sys.argv) > 1:  # e.g. float16:64,64,64,2 or float32:64,256,32,4:c
    CONFIGS = []
    for arg in sys.argv[1:]:
        dt, t, *shape = arg.split(":")
        CONFIGS.append((dt, tuple(int(v) for v in t.split(",")), shape[0] if shape else "b"))


def main() -> int:
    gen = torch.Generator(device="cuda").manual_seed(0)
    launch = dk.CupyLauncher()
    for dtype_name, tile, shape in CONFIGS:
        n, c, cout, h = SHAPES[shape]
        dt = getattr(torch, dtype_name)
        x = torch.randn(n, h, h, c, generator=gen, device="cuda").to(dt)
        w = (torch.randn(cout, 3, 3, c, generator=gen, device="cuda") / (9 * c) ** 0.5).to(dt)
        b = torch.randn(cout, generator=gen, device="cuda").to(dt)
        off = (2 * torch.randn(n, 18, h, h, generator=gen, device="cuda")).to(dt)
        msk = torch.sigmoid(torch.randn(n, 9, h, h, generator=gen, device="cuda")).to(dt)
        launch(x, off, msk, w, b, dk.DCNv2Attrs(pads=(1, 1, 1, 1)), tile=tile, layout="nhwc")
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
