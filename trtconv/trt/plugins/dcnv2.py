"""``trtconv::DCNv2`` as a TensorRT Python plugin with an ahead-of-time (AOT) implementation.

TensorRT (>= 10.9) asks ``aot_impl`` for a kernel name, its PTX, launch geometry and the
scalar arguments as symbolic expressions, and embeds them in the engine: the engine then
runs on any TensorRT runtime (trtexec, C++) without Python or this module. The PTX is the
package data file ``dcnv2.ptx`` (see ``dcnv2_kernel``); tactics are the compiled tile
shapes, timed by TensorRT at build time.

No ``from __future__ import annotations`` here: ``tensorrt.plugin`` inspects the
annotations of the decorated functions at registration and needs real classes.
"""

from typing import Any

import numpy as np
import numpy.typing as npt

from trtconv.trt.cudart import compute_capability
from trtconv.trt.plugins import dcnv2_kernel as dk

PLUGIN_ID = dk.PLUGIN_ID

_REGISTERED = False
# Set by the builder before each build (set_portable): an engine for other GPUs
# (hardware compatibility "ampere+") must not embed the compute_90a kernels.
_PORTABLE = False


def set_portable(portable: bool) -> None:
    """Offer only the compute_80 kernels (True) or also the Hopper ones where they run (False).

    TensorRT gives a plugin's autotune no view of the builder config, so the builder says
    it here before building.
    """
    global _PORTABLE
    _PORTABLE = bool(portable)


def _build_gpu_capability() -> tuple[int, int] | None:
    """Compute capability of the GPU the engine is being built on (None if unknown)."""
    try:
        from polygraphy import cuda


        return compute_capability(cuda.wrapper().handle)
    except Exception:  # no runtime to ask: keep to the portable kernels
        return None


def tactics(allow_tf32: bool, capability: tuple[int, int] | None, portable: bool) -> list[int]:
    """TensorRT tactic numbers (1-based indices into dk.ALL_TILES) that can run for this build."""
    usable = dk.usable_tiles(capability, accurate_fp32=not allow_tf32, portable=portable)
    return [dk.ALL_TILES.index(t) + 1 for t in usable]

# TensorRT DataType name -> (dtype name used by dcnv2_kernel, autotune type string, channels-last format)
_TYPES = {
    "FLOAT": ("float32", "FP32", "HWC"),
    "HALF": ("float16", "FP16", "HWC8"),
    "BF16": ("bfloat16", "BF16", "HWC8"),
}


def _const(expr: Any, what: str) -> int:
    """A build-time constant dimension, or a clear error."""
    if not expr.is_constant:
        raise ValueError(f"{PLUGIN_ID}: {what} must be known when the engine is built (it is dynamic)")
    return int(expr.constant_value)


def _attrs(
    stride: Any, pads: Any, dilation: Any, group: int, deformable_group: int, allow_tf32: int
) -> dk.DCNv2Attrs:
    return dk.DCNv2Attrs.from_fields(
        np.asarray(stride).reshape(-1), np.asarray(pads).reshape(-1), np.asarray(dilation).reshape(-1),
        group, deformable_group, allow_tf32,
    )


def ensure_registered() -> None:
    # Over 80 lines: the three plugin callbacks nest here, defined only after the lazy `import tensorrt.plugin`.
    """Register the plugin with TensorRT's plugin registry (idempotent).

    Call before parsing an ONNX model with ``DCNv2`` nodes in the ``trtconv`` namespace
    and before deserializing an engine built with them in the same process.
    """
    global _REGISTERED
    if _REGISTERED:
        return
    import tensorrt as trt
    import tensorrt.plugin as trtp

    @trtp.register(PLUGIN_ID)
    def dcnv2_desc(
        x: trtp.TensorDesc,
        offset: trtp.TensorDesc,
        mask: trtp.TensorDesc,
        weight: trtp.TensorDesc,
        bias: trtp.TensorDesc,
        stride: npt.NDArray[np.int32],
        pads: npt.NDArray[np.int32],
        dilation: npt.NDArray[np.int32],
        group: int,
        deformable_group: int,
        allow_tf32: int,
    ) -> trtp.TensorDesc:
        attrs = _attrs(stride, pads, dilation, group, deformable_group, allow_tf32)
        kh = _const(weight.shape_expr[1], "the kernel height (weight dim 1)")
        kw = _const(weight.shape_expr[2], "the kernel width (weight dim 2)")
        out = x.like()
        ho, wo = dk.output_hw(x.shape_expr[2], x.shape_expr[3], kh, kw, attrs)
        out.shape_expr[1] = weight.shape_expr[0]
        out.shape_expr[2] = ho
        out.shape_expr[3] = wo
        return out

    @trtp.autotune(PLUGIN_ID)
    def dcnv2_autotune(
        x: trtp.TensorDesc,
        offset: trtp.TensorDesc,
        mask: trtp.TensorDesc,
        weight: trtp.TensorDesc,
        bias: trtp.TensorDesc,
        allow_tf32: int,
        outputs: tuple[trtp.TensorDesc],
    ) -> list[trtp.AutoTuneCombination]:
        capability = _build_gpu_capability()
        combos = []
        for dtype, type_str, channels_last in _TYPES.values():
            c = trtp.AutoTuneCombination()
            # x: channels-last only. The NCHW kernels run 2.4-4.3x slower than the channels-last ones,
            # and slower than a reformat to channels-last plus the channels-last kernel on every
            # shape benchmarked (docs/benchmarks.md, "+ref"), so TensorRT inserts that reformat.
            c.pos([0], type_str, channels_last)
            c.pos([1, 2, 3, 4, 5], type_str)  # offset, mask, weight, bias, output: LINEAR
            c.tactics(tactics(bool(allow_tf32) or dtype != "float32", capability, _PORTABLE))
            combos.append(c)
        return combos

    @trtp.aot_impl(PLUGIN_ID)
    def dcnv2_aot_impl(
        x: trtp.TensorDesc,
        offset: trtp.TensorDesc,
        mask: trtp.TensorDesc,
        weight: trtp.TensorDesc,
        bias: trtp.TensorDesc,
        stride: npt.NDArray[np.int32],
        pads: npt.NDArray[np.int32],
        dilation: npt.NDArray[np.int32],
        group: int,
        deformable_group: int,
        allow_tf32: int,
        outputs: tuple[trtp.TensorDesc],
        tactic: int,
    ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        attrs = _attrs(stride, pads, dilation, group, deformable_group, allow_tf32)
        if x.dtype.name not in _TYPES:
            raise ValueError(f"{PLUGIN_ID}: unsupported data type {x.dtype}")
        dtype, _, channels_last = _TYPES[x.dtype.name]
        nhwc = x.has_shape and x.format == getattr(trt.TensorFormat, channels_last)
        c = _const(x.shape_expr[1], "the input channel count")
        cout = _const(weight.shape_expr[0], "the output channel count")
        kh = _const(weight.shape_expr[1], "the kernel height")
        kw = _const(weight.shape_expr[2], "the kernel width")
        xcs = (-(-c // 8) * 8) if (nhwc and channels_last == "HWC8") else c
        tile = dk.tactic_tile(tactic)
        name = dk.kernel_name(dtype, tile, attrs.allow_tf32, "nhwc" if nhwc else "nchw")

        n, h, w = x.shape_expr[0], x.shape_expr[2], x.shape_expr[3]
        y = outputs[0].shape_expr
        ho, wo = y[2], y[3]
        scalars = dk.scalar_args(n, c, h, w, cout, ho, wo, kh, kw, attrs, xcs)
        extra_args: Any = trtp.SymIntExprs.from_tuple(tuple(trtp.SymInt32(v) for v in scalars))

        params = trtp.KernelLaunchParams()
        gx, gy, gz = dk.grid(y[0] * ho * wo, cout // attrs.group, attrs.group, tile)
        params.grid_x = gx
        params.grid_y = gy
        params.grid_z = gz
        params.block_x = dk.threads(tile)
        params.shared_mem = 0  # static shared memory only (sm_90a entries: up to 104 KiB, no opt-in)
        return name.encode(), dk.entry_ptx(name).encode(), params, extra_args

    _REGISTERED = True
