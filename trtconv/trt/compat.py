"""The TensorRT 10.x / 11.x / RTX API differences trtconv depends on, each handled by name, explicitly.

(What differs between TensorRT and TensorRT-RTX as *products* — plugins, timing cache,
compute-capability targets — is data in ``trtconv.trt.flavour``; this module holds the
calls that differ.)

- Network creation: 11.x is always strongly typed (STRONGLY_TYPED is kept but ignored);
  10.x must be asked for it, or it would pick layer precisions itself and ignore the
  FP16 casts / Q-DQ nodes our precision stage wrote. EXPLICIT_BATCH is gone in 11.x and
  ignored in 10.x, so it is never set.
- Enum integers were renumbered (STRONGLY_TYPED 1 → 0, VERSION_COMPATIBLE 13 → 12): flags
  are looked up by name at run time and never stored as integers.
- FP16/INT8 BuilderFlags and calibrators do not exist in 11.x and are deprecated in 10.x:
  trtconv never uses them on either (precision is in the ONNX).
- ``engine.device_memory_size`` is gone in 11.x: use ``device_memory_size_v2`` (10.x has both).
- RTX (API close to 11.x): always strongly typed; builds for a list of compute capabilities
  (``num_compute_capabilities`` + ``set_compute_capability``), which returns False for a
  target this RTX does not know instead of raising; ``hardware_compatibility_level`` only
  logs "unsupported in TensorRT-RTX" and is never set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtconv.errors import BackendUnavailableError, UsageError
from trtconv.plan import HardwareCompat
from trtconv.trt.flavour import TENSORRT, current
from trtconv.trt.loader import major_version

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt


def network_flags(*, prefer_aot: bool = False) -> int:
    """Bit mask for ``Builder.create_network``: strongly typed on 10.x (implicit on 11.x), and
    PREFER_AOT_PYTHON_PLUGINS when trtconv's own plugins are registered."""
    flags = 0
    if current() == TENSORRT and major_version() < 11:
        strongly = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if strongly is None:
            raise BackendUnavailableError("this TensorRT has no strongly typed networks",
                                          hint="trtconv needs TensorRT 10.x (10.12 or newer) or 11.x")
        flags |= 1 << int(strongly)
    if prefer_aot:
        aot = getattr(trt.NetworkDefinitionCreationFlag, "PREFER_AOT_PYTHON_PLUGINS", None)
        if aot is not None:
            flags |= 1 << int(aot)
    return flags


def hardware_level(choice: HardwareCompat) -> trt.HardwareCompatibilityLevel:
    levels = {
        "none": trt.HardwareCompatibilityLevel.NONE,
        "ampere+": trt.HardwareCompatibilityLevel.AMPERE_PLUS,
        "same-cc": trt.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY,
    }
    return levels[choice]


def device_memory_bytes(engine: trt.ICudaEngine) -> int:
    return int(engine.device_memory_size_v2)


# RTX-only members are type-checked against the RTX stubs only: `make typecheck-trt` runs mypy with
# --always-true=RTX_API for rtx and --always-false=RTX_API for 10.x/11.x (where the branch is then
# unreachable). At run time it is True; the caller's flavour decides whether these run at all.
RTX_API = True


def set_compute_capabilities(config: trt.IBuilderConfig, targets: tuple[str, ...]) -> None:
    """Build an RTX engine for exactly ``targets`` ("8.6", "12.0", ...). TensorRT-RTX answers an
    unknown target with False and would fall back to the current device: that is an error here."""
    if not RTX_API:
        return
    config.num_compute_capabilities = len(targets)
    for index, cc in enumerate(targets):
        member = getattr(trt.ComputeCapability, "SM" + cc.replace(".", ""), None)
        if member is None or not config.set_compute_capability(member, index):
            raise UsageError(f"this TensorRT-RTX cannot build for compute capability {cc}",
                             hint="choose one its ComputeCapability enum lists (`trtconv doctor`)")
