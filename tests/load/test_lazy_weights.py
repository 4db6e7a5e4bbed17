"""Weights left on disk (``load_model(lazy_from=...)``): read on demand, streamed into outputs,
and a rewrite of such a model writes exactly what the rewrite of the loaded model writes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from realmodels import rapidocr_model

from trtconv.api import rewrite
from trtconv.load import load_model, save_model
from trtconv.load.external import LAZY_TENSOR_MIN, is_lazy, tensor_array
from trtconv.load.proto import weight_bytes
from trtconv.rewrites import RewriteSettings


def _all_external(src: Path, folder: Path) -> Path:
    """``src`` re-saved with its Constant nodes as initializers (as most exporters write
    weights) and every tensor in an external-data file, shape tensors too."""
    model = onnx.load(str(src))
    consts = [n for n in model.graph.node if n.op_type == "Constant" and n.attribute[0].name == "value"]
    for n in consts:
        # bytes in raw_data: the only ones onnx's saver moves to the data file
        model.graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), n.output[0]))
        model.graph.node.remove(n)
    path = folder / src.name
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=src.name + ".bin", size_threshold=0, convert_attribute=False)
    return path


@pytest.fixture(scope="module")
def det_external(tmp_path_factory) -> Path:
    return _all_external(rapidocr_model("det"), tmp_path_factory.mktemp("det"))


def test_lazy_tensors_read_what_loaded_ones_hold(det_external):
    eager = load_model(det_external)
    lazy = load_model(det_external, lazy_from=0)
    assert not load_model(det_external, lazy_from=1 << 40).proto.graph.initializer[0].external_data
    lazy_inits = [t for t in lazy.proto.graph.initializer if is_lazy(t)]
    assert lazy_inits and all(not t.raw_data for t in lazy_inits)
    assert all(is_lazy(u) == (numpy_helper.to_array(t).nbytes >= LAZY_TENSOR_MIN)  # small ones loaded
               for t, u in zip(eager.proto.graph.initializer, lazy.proto.graph.initializer))
    assert weight_bytes(lazy.proto) == weight_bytes(eager.proto)
    for t, u in zip(eager.proto.graph.initializer, lazy.proto.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(t), tensor_array(u))


def test_save_streams_lazy_tensors_from_their_file(det_external, tmp_path):
    lazy = load_model(det_external, lazy_from=0)
    out = save_model(lazy.proto, tmp_path / "copy.onnx")  # lazy weights: external data whatever the size
    back = load_model(out)
    assert {r.location for r in back.external_refs} == {"copy.onnx.data"}
    for t, u in zip(load_model(det_external).proto.graph.initializer, back.proto.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(t), numpy_helper.to_array(u))


def test_rewrite_of_lazy_weights_writes_what_the_loaded_model_gives(det_external, tmp_path):
    """Folding, INT64 narrowing and the graph proof all run (small tensors are loaded: folding
    needs their values), and the on-disk weights are copied into the output unchanged."""
    _rewrite_eager_and_lazy(det_external, tmp_path)
    written = onnx.load(str(tmp_path / "b" / "m.onnx"), load_external_data=False)
    assert not any(is_lazy(t) for t in written.graph.initializer)
    shutil.rmtree(tmp_path / "a")


def test_weights_that_fold_are_read_from_disk_for_the_folding(tmp_path):
    """A weight stored transposed behind a Transpose node (as some exporters write shared
    weights): folding needs its values, so the lazy rewrite reads it and folds as the eager one does."""
    model = onnx.load(str(rapidocr_model("det")))
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    conv = next(n for n in model.graph.node if n.op_type == "Conv"
                and numpy_helper.to_array(consts[n.input[1]].attribute[0].t).nbytes >= LAZY_TENSOR_MIN)
    w = numpy_helper.to_array(consts[conv.input[1]].attribute[0].t)
    model.graph.node.remove(consts[conv.input[1]])
    model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.transpose(1, 0, 2, 3)), "w_t"))
    model.graph.node.insert(0, onnx.helper.make_node("Transpose", ["w_t"], [conv.input[1]], perm=[1, 0, 2, 3]))
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "det.onnx"
    onnx.save_model(model, str(src))
    path = _all_external(src, tmp_path)
    eager, _ = _rewrite_eager_and_lazy(path, tmp_path)
    folded = next(c for c in eager.report.to_json()["cleanups"] if c["rule"] == "fold-constants")
    assert folded["count"] >= 1


def _rewrite_eager_and_lazy(path: Path, tmp_path: Path) -> tuple[Any, Any]:
    """Rewrite ``path`` with every weight loaded (into tmp_path/a) and with every weight left
    on disk (tmp_path/b); assert both wrote the same report and the same bytes."""
    shapes = {"x": (1, 3, 64, 64)}
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    eager = rewrite(path, a / "m.onnx", RewriteSettings(shapes=shapes, lazy_weights_bytes=1 << 40))
    lazy = rewrite(path, b / "m.onnx", RewriteSettings(shapes=shapes, lazy_weights_bytes=0))
    assert lazy.report.to_json() == eager.report.to_json()
    assert (a / "m.onnx").read_bytes() == (b / "m.onnx").read_bytes()
    assert (a / "m.onnx.data").read_bytes() == (b / "m.onnx.data").read_bytes()
    return eager, lazy

