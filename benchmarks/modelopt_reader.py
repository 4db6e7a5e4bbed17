"""The samples as ModelOpt's ONNX PTQ reads them: ONNX Runtime's ``CalibrationDataReader`` over a list.

Imported only in ModelOpt's own venv (its onnxruntime), by the benchmark scripts' ModelOpt children
(int8_gate_truth.py, int8_vs_peers.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def data_reader(samples: Sequence[Mapping[str, Any]]) -> Any:
    """A rewindable reader of ``samples`` (one feed dict each), for ``quantize(calibration_data_reader=...)``."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

        def get_first(self):
            return samples[0]

        def rewind(self) -> None:
            self.it = iter(samples)

    return Reader()
