"""Triton's ``config.pbtxt`` for a TensorRT plan, from the engine's bindings and profiles.

Triton's TensorRT backend wants the I/O names and types the engine has, and treats the first
dimension as the batch when ``max_batch_size > 0``: then ``dims`` leave it out. trtconv calls
the first dimension a batch only when every input and output has it dynamic (-1) and every
profile lets each input run with a batch of 1; ``max_batch_size`` is then the largest batch
every input accepts in some profile. Otherwise ``max_batch_size: 0`` and full dims.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trtconv.errors import UsageError

# TensorRT DataType names (network or engine) -> Triton's DataType enum
TRITON_TYPES = {
    "FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8", "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL",
}


@dataclass(frozen=True)
class Batching:
    max_batch_size: int  # 0: no batch dimension; dims are full
    reason: str


def triton_type(dtype: str, name: str) -> str:
    try:
        return TRITON_TYPES[dtype.upper()]
    except KeyError:
        raise UsageError(f"tensor {name!r} has TensorRT type {dtype}, which Triton's TensorRT backend cannot "
                         "exchange", hint="keep the model's inputs and outputs in a standard type") from None


def batching(bindings: Sequence[Mapping[str, Any]], profiles: Sequence[Mapping[str, Any]]) -> Batching:
    """Whether the first dimension is a batch, and the largest batch every input accepts."""
    if not bindings or any(not b["shape"] or b["shape"][0] != -1 for b in bindings):
        return Batching(0, "not every input and output has a dynamic first dimension")
    inputs = [b["name"] for b in bindings if b["mode"] == "input"]
    if not profiles:
        return Batching(0, "no optimization profile")
    best = None
    for name in inputs:
        ranges = [p[name] for p in profiles if name in p]
        if not ranges or any(r["min"][0] != 1 for r in ranges):
            return Batching(0, f"input {name!r} cannot run with a batch of 1 in every profile")
        most = max(r["max"][0] for r in ranges)
        best = most if best is None else min(best, most)
    return Batching(int(best or 0), "first dimension dynamic in every tensor, batch 1 allowed in every profile")


def _dims(shape: Sequence[int], batched: bool) -> list[int]:
    dims = list(shape[1:] if batched else shape)
    return dims or [1]  # Triton wants at least one dim: a scalar is reshaped from [1]


def _tensor_block(b: Mapping[str, Any], batched: bool, shape_tensor: bool = False) -> str:
    lines = [f"    name: {json.dumps(b['name'])}", f"    data_type: {triton_type(str(b['dtype']), b['name'])}",
             f"    dims: [ {', '.join(str(d) for d in _dims(b['shape'], batched))} ]"]
    if shape_tensor:  # Triton hands a shape tensor's values to the engine as a shape input, not as data
        lines.append("    is_shape_tensor: true")
    if not (b["shape"][1:] if batched else b["shape"]):
        lines.append("    reshape: { shape: [ ] }")
    return "  {\n" + "\n".join(lines) + "\n  }"


def config_pbtxt(name: str, bindings: Sequence[Mapping[str, Any]], profiles: Sequence[Mapping[str, Any]], *,
                 default_model_filename: str = "model.plan", cc_model_filenames: Mapping[str, str] | None = None,
                 shape_inputs: Sequence[str] = ()) -> str:
    """The text of ``config.pbtxt`` (protobuf text format of Triton's ``ModelConfig``); ``shape_inputs``:
    the inputs TensorRT made shape tensors (their values set shapes), marked ``is_shape_tensor``."""
    batch = batching(bindings, profiles)
    batched = batch.max_batch_size > 0
    out = [f"# written by trtconv: {batch.reason}", f"name: {json.dumps(name)}", 'platform: "tensorrt_plan"',
           f"max_batch_size: {batch.max_batch_size}", f"default_model_filename: {json.dumps(default_model_filename)}"]
    for cc, filename in sorted((cc_model_filenames or {}).items()):  # a map field: one entry per line
        out.append(f"cc_model_filenames {{ key: {json.dumps(cc)} value: {json.dumps(filename)} }}")
    for kind in ("input", "output"):
        blocks = [_tensor_block(b, batched, kind == "input" and b["name"] in shape_inputs)
                  for b in bindings if b["mode"] == kind]
        out.append(f"{kind} [\n" + ",\n".join(blocks) + "\n]")
    if profiles:
        names = ", ".join(json.dumps(str(i)) for i in range(len(profiles)))
        out.append(f"instance_group [\n  {{\n    kind: KIND_GPU\n    count: 1\n    profile: [ {names} ]\n  }}\n]")
    return "\n".join(out) + "\n"
