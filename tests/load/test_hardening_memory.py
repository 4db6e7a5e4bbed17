"""Declared sizes never drive allocation: a few bytes of ConstantOfShape that declare
16 GiB must end with a clear error, not with the OOM killer.

The CLI runs in a subprocess under RLIMIT_AS (6 GiB), so a regression fails this test
with an error exit instead of taking the test machine down.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import ExitCode
from trtconv.load import LAZY_WEIGHTS_BYTES, large_weights, load_model, override_input_shapes
from trtconv.load.memory import available_memory
from trtconv.load.shapes import largest_static_tensor

LIMIT = 6 * 2**30


def _bomb(src: Path, dst: Path) -> Path:
    """PP-OCR cls (real weights) plus a second output: ConstantOfShape([65536, 65536]) = 16 GiB."""
    m = override_input_shapes(load_model(src).proto, {"x": (1, 3, 48, 192)})
    m.graph.node.append(helper.make_node("Constant", [], ["bomb_shape"],
                                         value=numpy_helper.from_array(np.array([65536, 65536], np.int64))))
    m.graph.node.append(helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"],
                                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])))
    m.graph.output.append(helper.make_tensor_value_info("bomb", TensorProto.FLOAT, None))
    onnx.save(m, str(dst))
    return dst


def test_largest_static_tensor_sees_the_bomb(tmp_path, ocr_cls):
    bomb = onnx.load(str(_bomb(ocr_cls, tmp_path / "bomb.onnx")))
    assert largest_static_tensor(bomb) == ("bomb", 65536 * 65536 * 4)
    name, size = largest_static_tensor(load_model(ocr_cls).proto) or ("", 0)
    assert 0 < size < 2**20  # the real model's largest static tensor is a weight


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_available_memory_honours_rlimit():
    code = "from trtconv.load.memory import available_memory; print(available_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=_limited)
    assert int(out.stdout) <= LIMIT
    assert (available_memory() or 0) > 0


@pytest.mark.parametrize("args", [
    ["rewrite"],
    ["quantize", "--precision", "fp16", "--random-data", "2"],
    ["quantize", "--precision", "int8", "--int8-unverified", "--random-data", "2", "--calib-method", "minmax"],
])
def test_commands_refuse_to_run_a_shape_bomb(tmp_path, ocr_cls, args):
    bomb = _bomb(ocr_cls, tmp_path / "bomb.onnx")
    cmd = [sys.executable, "-m", "trtconv", args[0], str(bomb), "-o", str(tmp_path / "o.onnx"), *args[1:]]
    res = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limited, timeout=300)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    if args[0] == "rewrite":  # the rewrite itself is fine; its proof runs only where the change reaches
        out = res.stderr + res.stdout  # (the bomb's output is not reached) or is skipped with the reason
        assert res.returncode == 0 and ("1 of 2 output(s) reached" in out or "does not fit" in out), out[-2000:]
    else:
        assert res.returncode == ExitCode.INVALID_MODEL, res.stderr[-2000:]
        assert "bomb" in res.stderr and "GiB" in res.stderr


def test_large_weights_is_the_weights_on_disk_size(tmp_path, ocr_cls):
    """quantize and build give freed blocks back to the system (glibc's mmap threshold) only for models of
    LAZY_WEIGHTS_BYTES or more: below it, every block freed and allocated again costs page faults (ddddocr's INT8:
    2.1 M of them, a quarter of its CPU seconds) and the memory bound is not what limits a run."""
    assert not large_weights(ocr_cls)
    w = numpy_helper.from_array(np.ones(4096, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [w])
    onnx.save(helper.make_model(graph), str(tmp_path / "ext.onnx"), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    assert not large_weights(tmp_path / "ext.onnx")
    os.truncate(tmp_path / "w.bin", LAZY_WEIGHTS_BYTES)  # sparse: as large as the path's limit, nothing written
    assert large_weights(tmp_path / "ext.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert not large_weights(tmp_path / "bad.onnx")  # the load itself says what is wrong
    assert not large_weights(tmp_path / "missing.onnx")
