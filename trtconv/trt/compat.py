"""The TensorRT 10.x / 11.x differences trtconv depends on, each handled by name, explicitly.

- Network creation: 11.x is always strongly typed (STRONGLY_TYPED is kept but ignored);
  10.x must be asked for it, or it would pick layer precisions itself and ignore the
  FP16 casts / Q-DQ nodes our precision stage wrote. EXPLICIT_BATCH is gone in 11.x and
  ignored in 10.x, so it is never set.
- Enum integers were renumbered (STRONGLY_TYPED 1 → 0, VERSION_COMPATIBLE 13 → 12): flags
  are looked up by name at run time and never stored as integers.
- FP16/INT8 BuilderFlags and calibrators do not exist in 11.x and are deprecated in 10.x:
  trtconv never uses them on either (precision is in the ONNX).
- ``engine.device_memory_size`` is gone in 11.x: use ``device_memory_size_v2`` (10.x has both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtconv.errors import BackendUnavailableError
from trtconv.plan.plan import HardwareCompat
from trtconv.trt.loader import major_version

if TYPE_CHECKING:
    import tensorrt as trt


def network_flags(*, prefer_aot: bool = False) -> int:
    """Bit mask for ``Builder.create_network``: strongly typed on 10.x (implicit on 11.x), and
    PREFER_AOT_PYTHON_PLUGINS when trtconv's own plugins are registered."""
    import tensorrt as trt


    flags = 0
    if major_version() < 11:
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
    import tensorrt as trt

    levels = {
        "none": trt.HardwareCompatibilityLevel.NONE,
        "ampere+": trt.HardwareCompatibilityLevel.AMPERE_PLUS,
        "same-cc": trt.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY,
    }
    return levels[choice]


def device_memory_bytes(engine: trt.ICudaEngine) -> int:
    return int(engine.device_memory_size_v2)
