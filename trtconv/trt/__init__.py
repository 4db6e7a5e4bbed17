"""The only package that imports ``tensorrt``/``tensorrt_rtx``: one adapter over TensorRT 10.x, 11.x and TensorRT-RTX.

Everything else in trtconv must import and run without TensorRT or a GPU. Even here the
module is imported on first use, so importing these modules is free: ``flavour``
(TensorRT vs TensorRT-RTX, as data), ``loader`` (import + install hint; ``trt``, the
active flavour's module), ``compat`` (the API differences), ``builder`` (parse,
configure, build, check precision, serialize), ``engine`` (deserialize, inspect, run,
time), ``cancel`` (Ctrl-C/SIGTERM while TensorRT builds: recorded, the build cancelled),
``cudart`` (CUDA graphs and events via ctypes), ``environment`` (what the machine
has, for ``doctor``), ``plugins`` (trtconv's own TensorRT plugins).
"""

from trtconv.trt.builder import (
    build_engine,
)
from trtconv.trt.describe import (
    describe_engine,
)
from trtconv.trt.engine import (
    EngineRunner,
    engine_flavour,
    profile_shapes,
)
from trtconv.trt.environment import (
    RTX_ALTERNATIVE,
    Environment,
    TensorRTStatus,
    installed_target,
    probe,
    probe_driver,
    probe_tensorrt,
    problems,
)
from trtconv.trt.failing_node import (
    locate,
)
from trtconv.trt.flavour import (
    Flavour,
    for_target,
)
from trtconv.trt.loader import (
    tensorrt_version,
)
from trtconv.trt.realparse import (
    RTX_MODULE,
    run_isolated,
    target_module,
)

__all__ = [
    "locate",
    "RTX_MODULE",
    "EngineRunner",
    "Environment",
    "TensorRTStatus",
    "build_engine",
    "describe_engine",
    "engine_flavour",
    "Flavour",
    "for_target",
    "installed_target",
    "RTX_ALTERNATIVE",
    "probe",
    "probe_driver",
    "probe_tensorrt",
    "problems",
    "profile_shapes",
    "run_isolated",
    "target_module",
    "tensorrt_version",
]
