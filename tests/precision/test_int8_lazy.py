"""INT8 of a model whose weights stay on disk (``load_model(lazy_from=...)``, the path of models
over 256 MiB of external data) writes exactly what INT8 of the loaded model writes: weights
read where folded and quantized, the folded and INT8 ones spilled to scratch files as they
are made, the prepared model kept (kilobytes) instead of derived again, the save streaming
them all. The failing gate runs the heaviest path (per-layer sensitivity) on both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from bigmodels import det_samples, widen_det

from trtconv.load import load_model, save_model
from trtconv.load.external import is_lazy
from trtconv.precision.int8 import Int8AccuracyError, Int8Settings, quantize_int8
from trtconv.reference.compare import Thresholds


@pytest.fixture(scope="module")
def det(tmp_path_factory) -> tuple[Path, list[dict[str, np.ndarray]]]:
    folder = tmp_path_factory.mktemp("det")
    model = widen_det(2, folder, (64, 64))  # real PP-OCRv4 det weights, external data
    name = onnx.load(str(model), load_external_data=False).graph.input[0].name
    pages = sorted(det_samples(folder, (64, 64), 3).glob("*.npy"))  # rendered document pages
    return model, [{name: np.load(p)} for p in pages]


def _saved(model: onnx.ModelProto, folder: Path) -> tuple[bytes, bytes]:
    folder.mkdir()
    save_model(model, folder / "m.onnx", external_data=True)
    return (folder / "m.onnx").read_bytes(), (folder / "m.onnx.data").read_bytes()


@pytest.mark.parametrize("gate", [Thresholds(min_cosine=0.5), Thresholds(min_cosine=0.9999)],
                         ids=["passes", "fails"])
def test_int8_of_weights_on_disk_is_int8_of_loaded_weights(det, tmp_path, gate):
    model, samples = det
    eager, lazy = load_model(model), load_model(model, lazy_from=0)
    assert any(is_lazy(t) for t in lazy.proto.graph.initializer)
    settings = Int8Settings(unverified=True, thresholds=gate)
    # the calibration cache's key: from the file (as ``quantize`` does), or from the proto, whose
    # hash reads the weights on disk (as ``build`` does): the same key either way
    path = model if gate.min_cosine == 0.9999 else None
    results = []
    for proto in (eager.proto, lazy.proto):
        try:
            results.append(quantize_int8(proto, settings, samples, model_path=path, eval_samples=samples,
                                         eval_held_out=False))
        except Int8AccuracyError as exc:
            results.append(exc.result)
    a, b = results
    ja, jb = a.report.to_json(), b.report.to_json()
    for j in (ja, jb):  # what it cost may differ: weights on disk run the sensitivity in four sessions
        j.pop("calibration_seconds")
        j.pop("phase_seconds")
        sessions = j.pop("sensitivity_sessions")
        j["gate_evaluations"] -= sessions
    assert jb == ja
    assert b.report.sensitivity_sessions == (4 if b.report.sensitivity else 0)
    assert b.report.accuracy and b.report.folded_batchnorms and b.report.placed
    assert bool(b.report.violations) == (gate.min_cosine == 0.9999)  # "fails" ran the sensitivity pass
    assert not b.report.violations or b.report.sensitivity
    assert any(is_lazy(t) for t in b.model.graph.initializer)  # folded, INT8 weights wait in scratch files
    assert not any(is_lazy(t) for t in a.model.graph.initializer)
    assert _saved(b.model, tmp_path / "b") == _saved(a.model, tmp_path / "a")
