"""Every command stays under issue 20's memory bound on a large model from a real architecture.

PP-OCRv4 det with its real weights tiled 8 times per channel (tests/bigmodels.py: it computes
what PP-OCRv4 det computes; ~290 MB of external data, built here, never committed), three
rendered document pages as samples. Each command runs in a fresh process under an
address-space cap (RLIMIT_AS) of 1.5 x the model's size + 1 GiB: a run that needs more fails
to allocate (exit code or MemoryError) and the test fails. No timing is involved.
benchmarks/big_model_memory.py measures the same commands' peak RSS and wall time, and the
model over 2 GB.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from bigmodels import det_samples, model_bytes, widen_det

FACTOR = 8
HW = (64, 64)


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> tuple[Path, Path, int]:
    folder = tmp_path_factory.mktemp("wide")
    model = widen_det(FACTOR, folder, HW)
    return model, det_samples(folder, HW, 3), model_bytes(model)


def _commands(model: Path, calib: Path, out: Path) -> dict[str, list[str]]:
    m = str(model)
    return {
        "check": ["check", m, "--json"],
        "rewrite": ["rewrite", m, "-o", str(out / "r.onnx")],
        "fp16": ["quantize", m, "--precision", "fp16", "-o", str(out / "f.onnx")],
        "fp16-samples": ["quantize", m, "--precision", "fp16", "--calib-data", str(calib), "-o", str(out / "fd.onnx")],
        "int8-samples": ["quantize", m, "--precision", "int8", "--calib-data", str(calib), "-o", str(out / "i.onnx")],
        "build-prepare-only": ["build", m, "-o", str(out / "m.engine"), "--prepare-only"],
    }


# Not there yet (docs/benchmarks.md, "Memory and time on large models"): each still holds the
# weights about three times (input, working copy, output or an ONNX Runtime session built from
# serialized bytes). Strict: the day one fits, this test fails until the mark is removed.
_OVER = pytest.mark.xfail(strict=True, reason="issue 20: still over 1.5 x model + 1 GiB")


@pytest.mark.parametrize("command", ["check", "rewrite", pytest.param("fp16", marks=_OVER),
                                     pytest.param("fp16-samples", marks=_OVER),
                                     pytest.param("int8-samples", marks=_OVER),
                                     pytest.param("build-prepare-only", marks=_OVER)])
def test_command_fits_in_one_and_a_half_model_sizes_plus_1_gib(wide, tmp_path, command):
    model, calib, size = wide
    assert size > 250 << 20  # large enough that a second copy of the weights would not fit the slack
    limit = int(1.5 * size) + (1 << 30)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-m", "trtconv", *_commands(model, calib, tmp_path)[command]],
                          capture_output=True, text=True, preexec_fn=cap, env=env, timeout=600)
    # build --prepare-only writes the prepared ONNX and exits 0; without TensorRT a full build is 9
    assert proc.returncode == 0, f"exit {proc.returncode} under RLIMIT_AS {limit >> 20} MiB: {proc.stderr[-1500:]}"
