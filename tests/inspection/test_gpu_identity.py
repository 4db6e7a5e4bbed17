"""The GPU properties an engine identity records, read from a real GPU through the CUDA driver API.
Marked ``gpu``: skips where there is none, with the reason (tests/conftest.py)."""

from __future__ import annotations

import pytest
from builders import int32_relu_model

from trtconv.api import BuildSettings
from trtconv.pipeline import gpu_properties, request_identity
from trtconv.plan import identity_hash

pytestmark = pytest.mark.gpu


def test_gpu_properties_and_a_tensorrt_identity_name_this_gpu(tmp_path):
    gpu = gpu_properties()
    assert gpu is not None
    assert gpu["sm_count"] > 0 and gpu["memory_bytes"] > 2**30 and gpu["cuda_driver"]
    major, _, minor = gpu["compute_capability"].partition(".")
    assert major.isdigit() and minor.isdigit()
    model, engine = int32_relu_model(tmp_path / "m.onnx"), tmp_path / "m.engine"  # any model: the GPU is the subject
    material = request_identity(model, BuildSettings(), "11.4", BuildSettings().plan(model, engine, "11.4"))
    assert material["target"]["gpu"] == [gpu["name"], gpu["compute_capability"]]
    rtx = request_identity(model, BuildSettings(), "rtx", BuildSettings().plan(model, engine, "rtx"))
    assert "gpu" not in rtx["target"]  # an RTX engine is built for compute capabilities, not for this GPU
    assert identity_hash(material) != identity_hash(rtx)
