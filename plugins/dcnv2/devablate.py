"""Development only: time ablated copies of the Hopper kernel on shape (b) FP16 channels-last
(no corner loads / no wgmma) to see which part sets the time. Needs the ablation entries,
compiled in only with -DDCNV2_DEV; on the device machine (its copy of the tree is thrown away):
  nvcc -ptx -arch=sm_90a -std=c++17 -O3 -DDCNV2_DEV -o trtconv/trt/plugins/dcnv2_sm90a.ptx \
    plugins/dcnv2/dcnv2_sm90.cu && python3 plugins/dcnv2/devablate.py"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from dcn_bench import time_us  # noqa: E402

from trtconv.trt.plugins import dcnv2_kernel as dk  # noqa: E402

names = sys.argv[1:] or [
    "dcnv2_f16_nhwc_m128n256k64v", "dcnv2_abl_noload_w", "dcnv2_abl_nomma_w"]
gen = torch.Generator(device="cuda").manual_seed(0)
n, c, cout, h = 8, 256, 256, 64
x = torch.randn(n, h, h, c, generator=gen, device="cuda").half()
w = (torch.randn(cout, 3, 3, c, generator=gen, device="cuda") / 48).half()
b = torch.randn(cout, generator=gen, device="cuda").half()
off = (2 * torch.randn(n, 18, h, h, generator=gen, device="cuda")).half()
msk = torch.sigmoid(torch.randn(n, 9, h, h, generator=gen, device="cuda")).half()
launcher = dk.CupyLauncher()
attrs = dk.DCNv2Attrs(pads=(1, 1, 1, 1))
for name in names:
    run, out = launcher.prepare(x, off, msk, w, b, attrs, tile=(128, 256, 64, 5), layout="nhwc", entry=name)
    run()
    torch.cuda.synchronize()
    print(f"{name}: {time_us(torch, run, 20, 9):.1f} us", flush=True)
