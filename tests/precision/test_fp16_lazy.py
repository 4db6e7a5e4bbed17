"""FP16 of a model whose weights stay on disk (``load_model(lazy_from=...)``, the path of
models over 256 MiB of external data) writes exactly what FP16 of the loaded model writes:
weights read where converted, converted ones spilled to a scratch file, the accuracy
check's FP32 twin converted there, the save streaming them all."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from bigmodels import widen_det

from trtconv.load import load_model, save_model
from trtconv.load.external import is_lazy
from trtconv.precision.fp16 import convert_fp16
from trtconv.reference.ort import random_feeds


@pytest.fixture(scope="module")
def det(tmp_path_factory) -> Path:
    return widen_det(2, tmp_path_factory.mktemp("det"), (64, 64))  # real PP-OCRv4 det weights, external data


def test_fp16_of_weights_on_disk_is_fp16_of_loaded_weights(det, tmp_path):
    eager, lazy = load_model(det), load_model(det, lazy_from=0)
    assert any(is_lazy(t) for t in lazy.proto.graph.initializer)
    samples = [random_feeds(eager.proto, seed=s) for s in range(2)]
    a = convert_fp16(eager.proto, samples=samples)
    b = convert_fp16(lazy.proto, samples=samples)
    assert b.report.to_json() == a.report.to_json()
    assert b.report.samples == 2 and b.report.accuracy  # the accuracy check ran, on the on-disk twin too
    assert any(is_lazy(t) for t in b.model.graph.initializer)  # converted weights wait in the scratch file
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    save_model(a.model, tmp_path / "a" / "m.onnx", external_data=True)
    save_model(b.model, tmp_path / "b" / "m.onnx", external_data=True)
    assert (tmp_path / "a" / "m.onnx").read_bytes() == (tmp_path / "b" / "m.onnx").read_bytes()
    assert (tmp_path / "a" / "m.onnx.data").read_bytes() == (tmp_path / "b" / "m.onnx.data").read_bytes()
    saved = onnx.load(str(tmp_path / "b" / "m.onnx"), load_external_data=False)
    assert not any(is_lazy(t) for t in saved.graph.initializer)
