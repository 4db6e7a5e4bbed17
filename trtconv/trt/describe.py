"""What an engine holds, as plain data: its layers, its I/O bindings and profiles, its plugin creators.

Two sources. A network (parsed, strongly typed) is described at build time: a strongly typed
build must follow its types, so its layer table is what the engine runs where the engine
itself cannot be inspected (TensorRT-RTX without an RTX GPU). A deserialized engine is
described live through the engine inspector (TensorRT 10/11 with a GPU). Both give the
inspector's JSON schema (``Name``, ``LayerType``, ``Inputs``/``Outputs`` with ``DataType``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtconv.trt.engine import deserialize, dims_tuple, inspector_json
from trtconv.trt.flavour import Flavour, active
from trtconv.trt.session import LogBridge, load_plugins

if TYPE_CHECKING:
    import tensorrt as trt
else:
    from trtconv.trt.loader import trt


def _name(value: object) -> str:
    return str(value).rsplit(".", 1)[-1]


def network_bindings(network: trt.INetworkDefinition) -> list[dict[str, Any]]:
    """The network's inputs and outputs: name, mode, TensorRT data type, shape (-1: dynamic)."""
    out = []
    for mode, count, get in (("input", network.num_inputs, network.get_input),
                             ("output", network.num_outputs, network.get_output)):
        for i in range(count):
            t = get(i)
            out.append({"name": t.name, "mode": mode, "dtype": _name(t.dtype), "shape": list(dims_tuple(t.shape))})
    return out


def engine_bindings(engine: trt.ICudaEngine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(bindings, profiles) of a deserialized engine; profiles as the manifest writes them."""
    bindings, inputs = [], []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        mode = "input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
        bindings.append({"name": name, "mode": mode, "dtype": _name(engine.get_tensor_dtype(name)),
                         "shape": list(dims_tuple(engine.get_tensor_shape(name)))})
        if mode == "input":
            inputs.append(name)
    profiles = []
    for p in range(engine.num_optimization_profiles):
        shapes = {}
        for name in inputs:
            lo, opt, hi = (list(dims_tuple(s)) for s in engine.get_tensor_profile_shape(name, p))
            shapes[name] = {"min": lo, "opt": opt, "max": hi}
        profiles.append(shapes)
    return bindings, profiles


def describe_engine(engine_path: Path, flavour: Flavour, plugin_libraries: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Deserialize ``engine_path`` and read its layers (inspector JSON), bindings and profiles.

    Raises BackendUnavailableError (no TensorRT / GPU) or InvalidModelError (cannot deserialize)."""
    with active(flavour):
        logger = LogBridge.make()
        if flavour.plugins:
            load_plugins(logger, plugin_libraries)
        engine = deserialize(engine_path.read_bytes(), logger=logger)
        info = json.loads(inspector_json(engine))
        bindings, profiles = engine_bindings(engine)
    return {"layers": list(info.get("Layers") or []), "bindings": bindings, "profiles": profiles}
