"""The shipped DCNv2 PTX on a real GPU against trtconv's own float64 reference (deform_math).

Launches exactly the PTX the TensorRT plugin embeds (through CuPy), on fresh seeded random
inputs: odd sizes, stride/dilation 2, asymmetric pads, groups, deformable groups, sample
points outside the image, every tile shape. The output is poisoned with NaN first, so an
element the kernel forgets to write fails the test.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pytest

from trtconv.rewrites.dcn.deform_math import DcnParams, modulated_deform_conv2d
from trtconv.trt.plugins import dcnv2_kernel as dk

pytestmark = pytest.mark.gpu

# Relative L2 error limits against float64 (issue 6): FP32 1e-5, FP16 2e-3.
LIMITS = {"f32": 1e-5, "tf32": 2e-3, "f16": 2e-3, "bf16": 1.5e-2}


@dataclass(frozen=True)
class Case:
    n: int
    c: int
    cout: int
    h: int
    w: int
    k: tuple[int, int] = (3, 3)
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (1, 1, 1, 1)
    dilation: tuple[int, int] = (1, 1)
    group: int = 1
    dg: int = 1
    spread: float = 2.0  # offset std in pixels

    def attrs(self, allow_tf32: bool) -> dk.DCNv2Attrs:
        return dk.DCNv2Attrs(self.stride, self.pads, self.dilation, self.group, self.dg, allow_tf32)


CASES = {
    "odd-sizes": Case(3, 19, 13, 17, 23),
    "stride-dilation-2": Case(2, 32, 24, 31, 29, stride=(2, 2), dilation=(2, 2), pads=(2, 2, 2, 2)),
    "anisotropic-asym-pads": Case(1, 16, 40, 20, 33, k=(3, 5), stride=(1, 2), pads=(0, 3, 2, 1), dilation=(2, 1)),
    "groups": Case(2, 64, 96, 15, 16, group=4),
    "deformable-groups": Case(2, 48, 64, 14, 18, dg=3),
    "groups-and-dgroups-odd": Case(1, 36, 18, 13, 11, group=2, dg=4),
    "far-outside": Case(2, 24, 32, 12, 12, spread=9.0),
    "1x1": Case(1, 40, 72, 9, 10, k=(1, 1), pads=(0, 0, 0, 0)),
    "wide": Case(1, 128, 256, 24, 24, dg=2),
    "big-k-fp32": Case(1, 512, 64, 12, 12),  # K = 4608: FP32 accumulation over a long K
    # Output sizes that are multiples of 8: the "t" entries take their pixel-block path.
    "blocks-groups-dgroups": Case(3, 48, 40, 16, 24, group=2, dg=3),
    "blocks-stride-2": Case(2, 32, 24, 32, 48, stride=(2, 2)),
}


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


@pytest.fixture(scope="module")
def launcher():
    _torch()
    return dk.CupyLauncher()


def _inputs(case: Case, dtype, seed: int):
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    kh, kw = case.k
    ho, wo = dk.output_hw(case.h, case.w, kh, kw, case.attrs(True))

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)

    x = rnd(case.n, case.c, case.h, case.w)
    offset = rnd(case.n, 2 * case.dg * kh * kw, ho, wo, scale=case.spread)
    mask = torch.sigmoid(torch.randn(case.n, case.dg * kh * kw, ho, wo, generator=g, device="cuda")).to(dtype)
    weight = rnd(case.cout, case.c // case.group, kh, kw, scale=(case.c // case.group * kh * kw) ** -0.5)
    bias = rnd(case.cout)
    return x, offset, mask, weight, bias


def reference(case: Case, x, offset, mask, weight, bias):
    """The float64 NumPy reference every DCN rewrite is proven against, on the GPU's inputs."""
    torch = _torch()

    def host(t):
        return t.detach().double().cpu().numpy()

    params = DcnParams(case.stride, case.pads, case.dilation, case.group, case.dg)
    ref = modulated_deform_conv2d(host(x), host(offset), host(mask), host(weight), host(bias), params)
    return torch.from_numpy(ref).to(x.device)


def channels_last(x, align: int = 8):
    """x as TensorRT HWC8 would hold it: [N, H, W, C rounded up], padding channels NaN
    (the kernel must never read them)."""
    torch = _torch()
    n, c, h, w = x.shape
    cs = -(-c // align) * align
    xl = torch.full((n, h, w, cs), float("nan"), dtype=x.dtype, device=x.device)
    xl[..., :c] = x.permute(0, 2, 3, 1)
    return xl


def run_kernel(launcher, case: Case, inputs, allow_tf32: bool, tile=None, layout="nchw"):
    torch = _torch()
    x, offset, mask, weight, bias = inputs
    ho, wo = dk.output_hw(case.h, case.w, case.k[0], case.k[1], case.attrs(True))
    out = torch.full((case.n, case.cout, ho, wo), float("nan"), dtype=x.dtype, device="cuda")
    w_ohwi = weight.permute(0, 2, 3, 1).contiguous()
    xin = channels_last(x) if layout == "nhwc" else x
    launcher(xin, offset, mask, w_ohwi, bias, case.attrs(allow_tf32), out=out, tile=tile, layout=layout)
    torch.cuda.synchronize()
    return out


def rel_err(out, ref) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def checked_error(launcher, case: Case, inputs, allow_tf32: bool, tile=None, layout="nchw") -> float:
    """Run the kernel; every output element must be written (the output starts NaN); return
    its relative error against the float64 reference."""
    out = run_kernel(launcher, case, inputs, allow_tf32, tile=tile, layout=layout)
    assert not _torch().isnan(out).any(), "some output elements were never written"
    return rel_err(out, reference(case, *inputs))


MODES = [("f32", "float32", False), ("tf32", "float32", True), ("f16", "float16", True), ("bf16", "bfloat16", True)]


def _skip_unusable(tile, tf32: bool) -> None:
    """The compute_90a tiles run on compute capability 9.0 only, and not in FP32-accurate mode."""
    torch = _torch()
    if tile not in dk.usable_tiles(torch.cuda.get_device_capability(), accurate_fp32=not tf32):
        pytest.skip(f"tile {tile} needs compute capability 9.0 and TF32/FP16/BF16")


@pytest.mark.parametrize("tile", [None, *dk.SM90_TILES], ids=["default", *map(dk.tile_id, dk.SM90_TILES)])
@pytest.mark.parametrize("layout", dk.LAYOUTS)
@pytest.mark.parametrize("mode,dtype_name,tf32", MODES, ids=[m[0] for m in MODES])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_reference(launcher, name, mode, dtype_name, tf32, layout, tile):
    """Every case on the default tile, and on each Hopper (wgmma) tile where the GPU runs it."""
    torch = _torch()
    if tile is not None:
        _skip_unusable(tile, tf32)
    case = CASES[name]
    inputs = _inputs(case, getattr(torch, dtype_name), seed=zlib.crc32(f"{name}/{mode}/{layout}/{tile}".encode()))
    err = checked_error(launcher, case, inputs, tf32, tile=tile, layout=layout)
    assert err <= LIMITS[mode], f"{name} {mode}: rel err {err:.2e} > {LIMITS[mode]:.0e}"


@pytest.mark.parametrize("layout", dk.LAYOUTS)
@pytest.mark.parametrize("tile", dk.ALL_TILES, ids=list(map(dk.tile_id, dk.ALL_TILES)))
@pytest.mark.parametrize("mode,dtype_name,tf32", MODES, ids=[m[0] for m in MODES])
def test_every_tile(launcher, tile, mode, dtype_name, tf32, layout):
    torch = _torch()
    _skip_unusable(tile, tf32)
    case = Case(2, 80, 136, 19, 21, dg=2)  # partial M, N and K tiles; 40 channels per deformable group
    inputs = _inputs(case, getattr(torch, dtype_name), seed=7 + dk.ALL_TILES.index(tile))
    err = checked_error(launcher, case, inputs, tf32, tile=tile, layout=layout)
    assert err <= LIMITS[mode], f"tile {tile} {mode}: rel err {err:.2e}"


@pytest.mark.parametrize("layout", dk.LAYOUTS)
@pytest.mark.parametrize("tile", dk.ALL_TILES, ids=list(map(dk.tile_id, dk.ALL_TILES)))
@pytest.mark.parametrize("mode,dtype_name,tf32", [MODES[1], MODES[2]], ids=["tf32", "f16"])
def test_every_tile_pixel_blocks(launcher, tile, mode, dtype_name, tf32, layout):
    """Ho, Wo multiples of 8 (pixel-block entries take their 2-D path; the wgmma entries their
    vectorized epilogue), partial N tiles, N > 1."""
    torch = _torch()
    _skip_unusable(tile, tf32)
    case = Case(3, 80, 136, 16, 24, dg=2)
    inputs = _inputs(case, getattr(torch, dtype_name), seed=70 + dk.ALL_TILES.index(tile))
    err = checked_error(launcher, case, inputs, tf32, tile=tile, layout=layout)
    assert err <= LIMITS[mode], f"tile {tile} {mode}: rel err {err:.2e}"


@pytest.mark.parametrize("layout", dk.LAYOUTS)
@pytest.mark.parametrize("size", [16, 64, 128, 256])
@pytest.mark.parametrize("mode,dtype_name,tf32", [MODES[0], MODES[2]], ids=["f32", "f16"])
def test_error_flat_in_size(launcher, size, mode, dtype_name, tf32, layout):
    """Sampling coordinates are FP32, so the FP16 error must not grow with H and W."""
    torch = _torch()
    case = Case(1, 64, 64, size, size, spread=2.0)
    inputs = _inputs(case, getattr(torch, dtype_name), seed=1000 + size)
    err = checked_error(launcher, case, inputs, tf32, layout=layout)
    assert err <= LIMITS[mode], f"{size}x{size} {mode}: rel err {err:.2e}"
    if mode == "f16":
        assert err <= 1e-3, f"FP16 error {err:.2e} at {size}x{size}: should stay near dense-conv FP16 (~3e-4)"


def test_dynamic_shapes_one_kernel(launcher):
    """One entry point serves any batch and H/W, as in a dynamic-shape engine (the pixel-block
    tile takes its 8x8 path at 8x8 and 64x48 and its row path at 33x17)."""
    torch = _torch()
    for i, (n, h, w) in enumerate([(1, 8, 8), (5, 33, 17), (2, 64, 48)]):
        case = Case(n, 32, 32, h, w)
        inputs = _inputs(case, torch.float16, seed=300 + i)
        err = checked_error(launcher, case, inputs, True, tile=(64, 64, 64, 2), layout=dk.LAYOUTS[i % 2])
        assert err <= LIMITS["f16"]
