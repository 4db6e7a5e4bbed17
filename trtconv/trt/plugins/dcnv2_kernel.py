"""Facts about the fused DCNv2 kernel that the TensorRT plugin and the GPU tests share.

No TensorRT here: the plugin definition (``dcnv2``) and the CuPy test launcher both take
entry names, tile shapes, scalar arguments and grids from this module, so the PTX that
TensorRT embeds is launched exactly as the tests launch it. The PTX ships as package data
(``dcnv2.ptx``, generated from ``plugins/dcnv2/dcnv2.cu`` by ``make dcnv2-ptx``).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from trtconv.errors import InvalidModelError, UnsupportedModelError

PLUGIN_NAME = "DCNv2"
PLUGIN_NAMESPACE = "trtconv"
PLUGIN_ID = f"{PLUGIN_NAMESPACE}::{PLUGIN_NAME}"
PLUGIN_VERSION = "1"  # tensorrt.plugin plugins always have version "1"

PTX_FILE = "dcnv2.ptx"
SM90_PTX_FILE = "dcnv2_sm90a.ptx"
PTX_ARCH = "sm_80"  # compute_80 PTX: the driver compiles it for Ampere, Ada, Hopper and later
SM90_PTX_ARCH = "sm_90a"  # compute_90a PTX (wgmma): runs on compute capability 9.0 only
THREADS = 256  # block size of the compute_80 entry points

# Tiles compiled into the PTX: (BM output pixels, BN output channels, KCH channels per K
# step for 16-bit types -- FP32 steps take KCH/2 --, variant). Every entry computes each
# pixel's sampling recipe (corner offsets, bilinear weights x mask) once per tap into shared
# memory and reuses it for every channel chunk (v10, plugins/dcnv2/NOTES.md). Variant 0 ("s"
# entries): a K step's loads are issued at its start; 1 ("p"): one step ahead; 2 ("t"): as
# 0, the pixel tile being an 8-wide block of output pixels where Ho and Wo allow it (more L1
# hits). The TensorRT tactic number is the 1-based index into this tuple; TensorRT times them
# all at build time.
Tile = tuple[int, int, int, int]
TILES: tuple[Tile, ...] = ((64, 128, 32, 0), (64, 64, 64, 0), (64, 64, 64, 2), (32, 128, 32, 0), (64, 256, 16, 1))
# Variants 3 and up: the Hopper kernel (plugins/dcnv2/dcnv2_sm90.cu, compute_90a PTX),
# warpgroup MMA; FP16, BF16 and TF32 only (the FP32-accurate mode has no wgmma entry).
# "w": one warpgroup per 64 pixels takes all BN channels; "v": two warpgroups per 64 pixels
# take BN / 2 each (half the accumulators per thread, twice the warps). A digit: split-K over
# a cluster of that many CTAs, which sum their partial tiles through distributed shared
# memory in a fixed order -- for layers with few output pixels and a long K, such as shapes
# (c), (d) and (e), and for (a), whose 256 tiles split in two fill the GPU in one wave at four
# CTAs per SM. "x4" / "x2": four / two gather passes' corner loads in flight at once instead
# of one. The third number is FP16 channels per K step: 64 = 128-byte steps (whole cache lines
# per gather, per-pixel recipes in shared memory, static shared memory past 48 KiB). One tile
# per benchmark shape it wins, in the order (b), (e), (c), (d), (f), (a) (plugins/dcnv2/NOTES.md).
# Variant 6 ("wx4", 64 x 64) was (a)'s tile until round dcnk3 replaced it by variant 7: its tactic
# number is 7's now (an engine embeds its kernel's PTX, so engines built before keep theirs).
SM90_TILES: tuple[Tile, ...] = ((128, 256, 64, 3), (128, 256, 64, 4), (64, 256, 64, 5), (64, 128, 64, 5),
                                (128, 128, 64, 6), (64, 64, 64, 7))
ALL_TILES: tuple[Tile, ...] = TILES + SM90_TILES
_VARIANT = ("s", "p", "t", "v", "v2", "v6", "wx4", "w2x2")


# Layouts of x the PTX has entry points for: "nchw" (TensorRT LINEAR) and "nhwc" (channels
# last with a channel stride >= C: TensorRT HWC8 for FP16/BF16, HWC for FP32). Every other
# tensor is always NCHW/LINEAR.
LAYOUTS = ("nchw", "nhwc")

# I/O dtype name -> kernel name stem. FP32 I/O picks 'tf32' or 'f32' by allow_tf32.
DTYPES = ("float32", "float16", "bfloat16")
_STEM = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class DCNv2Attrs:
    """The plugin's fields, validated once (names and meaning as in trtconv/rewrites/dcn/dcnv2_spec.json)."""

    stride: tuple[int, ...] = (1, 1)  # h, w
    pads: tuple[int, ...] = (0, 0, 0, 0)  # top, left, bottom, right (ONNX order)
    dilation: tuple[int, ...] = (1, 1)  # h, w
    group: int = 1
    deformable_group: int = 1
    allow_tf32: bool = True

    def __post_init__(self) -> None:
        bad = []
        if len(self.stride) != 2 or min(self.stride) < 1:
            bad.append(f"stride {list(self.stride)} (two values >= 1)")
        if len(self.pads) != 4 or min(self.pads) < 0:
            bad.append(f"pads {list(self.pads)} (four values >= 0: top, left, bottom, right)")
        if len(self.dilation) != 2 or min(self.dilation) < 1:
            bad.append(f"dilation {list(self.dilation)} (two values >= 1)")
        if self.group < 1:
            bad.append(f"group {self.group} (>= 1)")
        if self.deformable_group < 1:
            bad.append(f"deformable_group {self.deformable_group} (>= 1)")
        if bad:
            raise InvalidModelError(
                f"{PLUGIN_ID}: invalid field(s): {'; '.join(bad)}",
                hint="fix the plugin node's attributes; plugins/dcnv2/README.md lists them",
            )

    @classmethod
    def from_fields(
        cls,
        stride: Iterable[Any],
        pads: Iterable[Any],
        dilation: Iterable[Any],
        group: int,
        deformable_group: int,
        allow_tf32: int | bool,
    ) -> DCNv2Attrs:
        """Build from plugin fields as TensorRT hands them over (numpy arrays and ints)."""
        return cls(
            stride=tuple(int(v) for v in stride),
            pads=tuple(int(v) for v in pads),
            dilation=tuple(int(v) for v in dilation),
            group=int(group),
            deformable_group=int(deformable_group),
            allow_tf32=bool(int(allow_tf32)),
        )


def output_hw(h: Any, w: Any, kh: int, kw: int, attrs: DCNv2Attrs) -> tuple[Any, Any]:
    """Output height and width by the convolution rule.

    ``h``/``w`` may be ints or TensorRT symbolic sizes (anything with ``+`` and ``//``
    against ints), so the plugin's shape function and the tests share this formula.
    """
    sh, sw = attrs.stride
    pt, pl, pb, pr = attrs.pads
    dh, dw = attrs.dilation
    ho = (h + (pt + pb - dh * (kh - 1) - 1)) // sh + 1
    wo = (w + (pl + pr - dw * (kw - 1) - 1)) // sw + 1
    return ho, wo


def check_shapes(
    x: Sequence[int], offset: Sequence[int], mask: Sequence[int], weight: Sequence[int], bias: Sequence[int],
    attrs: DCNv2Attrs,
) -> tuple[int, int]:
    """Validate concrete input shapes against each other; return (Ho, Wo)."""
    n, c, h, w = (int(v) for v in x)
    cout, kh, kw, cg = (int(v) for v in weight)
    g, dg = attrs.group, attrs.deformable_group
    problems = []
    if c % g or cout % g:
        problems.append(f"C={c} and Cout={cout} must be divisible by group={g}")
    if c % dg:
        problems.append(f"C={c} must be divisible by deformable_group={dg}")
    if cg * g != c:
        problems.append(f"weight (OHWI) {list(weight)}: last dim must be C/group = {c // g}")
    if kh * kw > 64:
        problems.append(f"kernel {kh}x{kw} has more than 64 taps")
    ho, wo = output_hw(h, w, kh, kw, attrs)
    if ho < 1 or wo < 1:
        problems.append(f"output would be {ho}x{wo}")
    if list(offset) != [n, 2 * dg * kh * kw, ho, wo]:
        problems.append(f"offset {list(offset)} != {[n, 2 * dg * kh * kw, ho, wo]}")
    if list(mask) != [n, dg * kh * kw, ho, wo]:
        problems.append(f"mask {list(mask)} != {[n, dg * kh * kw, ho, wo]}")
    if list(bias) != [cout]:
        problems.append(f"bias {list(bias)} != {[cout]}")
    big = max(n * c * h * w, n * cout * ho * wo, n * 2 * dg * kh * kw * ho * wo)
    if big >= 2**31:
        raise UnsupportedModelError(
            f"{PLUGIN_ID}: a tensor has {big} elements; the kernel indexes with int32",
            hint="split the batch",
        )
    if problems:
        raise InvalidModelError(f"{PLUGIN_ID}: {'; '.join(problems)}", hint="see plugins/dcnv2/README.md")
    return ho, wo


def kernel_name(dtype: str, tile: Tile, allow_tf32: bool = True, layout: str = "nchw") -> str:
    """Entry point in the PTX for an I/O dtype, a tile shape and the layout of x."""
    if dtype not in DTYPES:
        raise UnsupportedModelError(f"{PLUGIN_ID}: dtype {dtype} not supported", hint=f"use one of {DTYPES}")
    if tile not in ALL_TILES:
        raise ValueError(f"no kernel for tile {tile}; compiled tiles: {ALL_TILES}")
    if layout not in LAYOUTS:
        raise ValueError(f"no kernel for layout {layout}; compiled layouts: {LAYOUTS}")
    stem = _STEM.get(dtype) or ("tf32" if allow_tf32 else "f32")
    if stem == "f32" and tile in SM90_TILES:
        raise ValueError(f"tile {tile} has no FP32-accurate entry; use one of {TILES}")
    return f"dcnv2_{stem}_{layout}_{tile_id(tile)}"


def tile_id(tile: Tile) -> str:
    """A tile's name, as its entry points end: 'm64n256k64v6'."""
    return f"m{tile[0]}n{tile[1]}k{tile[2]}{_VARIANT[tile[3]]}"


def split_k(tile: Tile) -> int:
    """CTAs that share one output tile along K (the cluster size of a split-K entry)."""
    digits = re.match(r"[wv](\d*)", _VARIANT[tile[3]])
    return int(digits.group(1)) if tile in SM90_TILES and digits and digits.group(1) else 1


def tactic_tile(tactic: int | None) -> Tile:
    """TensorRT tactic (1-based index into ALL_TILES; 0/None = default) -> tile shape."""
    if not tactic:
        return TILES[0]
    return ALL_TILES[int(tactic) - 1]


def usable_tiles(capability: tuple[int, int] | None, accurate_fp32: bool = False, portable: bool = False) -> tuple[Tile, ...]:
    """The tiles that can run on a GPU of this compute capability (None: unknown).

    The compute_90a entries run on compute capability 9.0 alone (H100, H200, GH200); an
    engine meant for other GPUs (``portable``: hardware compatibility) or the FP32-accurate
    mode keeps to the compute_80 entries.
    """
    if capability == (9, 0) and not accurate_fp32 and not portable:
        return ALL_TILES
    return TILES


def threads(tile: Tile) -> int:
    """Block size of a tile's entry point."""
    if tile not in SM90_TILES:
        return THREADS
    return 2 * tile[0] * (2 if _VARIANT[tile[3]].startswith("v") else 1)


def pick_tile(m: int, cout_per_group: int, group: int, sms: int = 132) -> Tile:
    """A tile without timing (TensorRT times them all), from the measured winners
    (plugins/dcnv2/NOTES.md): 64x128 when those tiles fill the GPU, else 64x64x64."""
    if cout_per_group > 64 and -(-m // 64) * -(-cout_per_group // 128) * group >= sms:
        return (64, 128, 32, 0)
    return (64, 64, 64, 0)


def grid(m: Any, cout_per_group: int, group: int, tile: Tile) -> tuple[Any, int, int]:
    """Launch grid (x: pixel tiles times the split-K factor, y: channel tiles, z: conv groups);
    ``m`` may be symbolic."""
    bm, bn = tile[0], tile[1]
    return ((m + (bm - 1)) // bm * split_k(tile), -(-cout_per_group // bn), group)


def scalar_args(
    n: Any, c: int, h: Any, w: Any, cout: int, ho: Any, wo: Any, kh: int, kw: int, attrs: DCNv2Attrs,
    x_channel_stride: int | None = None,
) -> tuple[Any, ...]:
    """The 18 int32 kernel parameters between the five input pointers and the output pointer.

    ``x_channel_stride``: elements between pixels of channels-last x (C, or C rounded up to 8
    for HWC8); ignored by the NCHW entry points.
    """
    sh, sw = attrs.stride
    pt, pl, _, _ = attrs.pads
    dh, dw = attrs.dilation
    xcs = c if x_channel_stride is None else x_channel_stride
    return (n, c, h, w, cout, ho, wo, kh, kw, sh, sw, pt, pl, dh, dw, attrs.group, attrs.deformable_group, xcs)


def load_ptx(file: str = PTX_FILE) -> str:
    """A shipped PTX file (package data): every entry point of one target architecture."""
    return resources.files(__package__).joinpath(file).read_text(encoding="ascii")


def ptx_file(name: str) -> str:
    """The PTX file that holds an entry point (compute_90a for the "w" and "v" tiles)."""
    return SM90_PTX_FILE if re.search(r"k\d+[wv]\d*(x\d+)?$", name) else PTX_FILE


@lru_cache(maxsize=64)
def entry_ptx(name: str) -> str:
    """A self-contained PTX module holding one entry point: what an engine embeds.

    The kernels call no PTX functions and keep their shared memory inside the entry, so
    the module header plus the text up to the next ``.entry`` is complete (TensorRT embeds ~0.2 MB per
    plugin instead of the whole file).
    """
    return single_entry(load_ptx(ptx_file(name)), name, ptx_file(name))


def single_entry(text: str, name: str, where: str = "the PTX") -> str:
    """Entry point ``name`` of a PTX module's text, with the module header, as its own module."""
    header = [ln for ln in text.splitlines()[:40] if ln.startswith((".version", ".target", ".address_size"))]
    start = text.find(f".visible .entry {name}(")
    if start < 0 or len(header) != 3:
        raise ValueError(f"{where} has no entry point {name}")
    end = text.find("\n.visible .entry ", start)  # the next entry, or the end of the file
    return "\n".join(header) + "\n\n" + text[start : len(text) if end < 0 else end].rstrip() + "\n"


class CupyLauncher:
    """Runs the shipped PTX on PyTorch CUDA tensors through CuPy, as TensorRT would launch it.

    For tests, benchmarks and debugging on a GPU without TensorRT. Inputs are NCHW tensors
    plus the weight in OHWI; all of one dtype (float32, float16 or bfloat16). With
    ``layout="nhwc"`` x is passed channels-last: a tensor [N, H, W, xcs] with xcs >= C.
    """

    def __init__(self, source: Callable[[str], tuple[str, str]] | None = None) -> None:
        """``source``: maps an entry key to (entry name, single-entry PTX); by default the
        shipped PTX (development scripts pass other builds, plugins/dcnv2/devvar.py)."""
        import cupy  # optional dependency (the `gpu` extra); imported only here

        self._cp = cupy
        self._dir = tempfile.TemporaryDirectory(prefix="trtconv-dcnv2-")
        self._functions: dict[str, Any] = {}
        self._source = source or (lambda name: (name, entry_ptx(name)))

    def function(self, key: str) -> Any:
        """The entry point for ``key``, loaded from its single-entry PTX (by default exactly
        the module the plugin embeds)."""
        if key not in self._functions:
            name, text = self._source(key)
            path = Path(self._dir.name) / f"{len(self._functions)}-{name}.ptx"
            path.write_text(text, encoding="ascii")
            self._functions[key] = self._cp.RawModule(path=str(path)).get_function(name)
        return self._functions[key]

    def _as_cupy(self, t: Any) -> Any:
        import torch

        if not t.is_contiguous():
            raise ValueError("DCNv2 kernel tensors must be contiguous")
        # CuPy has no bfloat16: every tensor travels as raw 16- or 32-bit words.
        view = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
        return self._cp.from_dlpack(view)

    def prepare(
        self, x: Any, offset: Any, mask: Any, weight_ohwi: Any, bias: Any, attrs: DCNv2Attrs,
        out: Any = None, tile: Tile | None = None, layout: str = "nchw", entry: str | None = None,
    ) -> tuple[Callable[[], None], Any]:
        """Check shapes once; return (launch, out) where launch() enqueues the kernel.

        ``entry``: run this entry point of the tile's PTX file instead of the one
        ``kernel_name`` gives (development builds, plugins/dcnv2/devvar.py).
        """
        import torch

        dtype = str(x.dtype).removeprefix("torch.")
        if layout == "nhwc":
            n, h, w, xcs = x.shape
            c = weight_ohwi.shape[3] * attrs.group
            if xcs < c:
                raise ValueError(f"channels-last x has {xcs} channels per pixel, needs >= {c}")
        else:
            n, c, h, w = x.shape
            xcs = c
        ho, wo = check_shapes((n, c, h, w), offset.shape, mask.shape, weight_ohwi.shape, bias.shape, attrs)
        cout, kh, kw, _ = weight_ohwi.shape
        for t in (offset, mask, weight_ohwi, bias):
            if t.dtype != x.dtype:
                raise ValueError(f"all inputs must be {x.dtype}, got {t.dtype}")
        if out is None:
            out = torch.empty((n, cout, ho, wo), dtype=x.dtype, device=x.device)
        if tuple(out.shape) != (n, cout, ho, wo) or out.dtype != x.dtype:
            raise ValueError(f"out must be {x.dtype} {[n, cout, ho, wo]}")
        coutg = cout // attrs.group
        if tile is None:
            sms = torch.cuda.get_device_properties(x.device).multi_processor_count
            tile = pick_tile(n * ho * wo, coutg, attrs.group, sms)
        fn = self.function(entry or kernel_name(dtype, tile, attrs.allow_tf32, layout))
        ints = [np.int32(v) for v in scalar_args(n, c, h, w, cout, ho, wo, kh, kw, attrs, xcs)]
        args = (*(self._as_cupy(t) for t in (x, offset, mask, weight_ohwi, bias)), *ints, self._as_cupy(out))
        blocks = grid(n * ho * wo, coutg, attrs.group, tile)
        nthreads = threads(tile)
        current = torch.cuda.current_stream(x.device)
        try:  # CuPy >= 14 reads the stream protocol; older CuPy takes the raw handle
            stream = self._cp.cuda.Stream.from_external(current)
        except Exception:
            stream = self._cp.cuda.ExternalStream(current.cuda_stream)

        def launch() -> None:
            with stream:
                fn(blocks, (nthreads,), args)

        return launch, out

    def __call__(
        self, x: Any, offset: Any, mask: Any, weight_ohwi: Any, bias: Any, attrs: DCNv2Attrs,
        out: Any = None, tile: Tile | None = None, layout: str = "nchw",
    ) -> Any:
        """Enqueue one forward pass on the current PyTorch stream; returns the output tensor."""
        launch, out = self.prepare(x, offset, mask, weight_ohwi, bias, attrs, out, tile, layout)
        launch()
        return out
