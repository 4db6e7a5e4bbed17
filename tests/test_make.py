"""examples/makefile/ run by GNU make on a real model: exact rebuilds from --deps, copies from --cache-dir.

CI has no TensorRT, so the Makefile runs up to the step this machine can do: the FP16
ONNX (`trtconv quantize`) and the prepared ONNX (`trtconv build --prepare-only`); the
engine rule is checked with `make -n`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import onnx
import pytest

from trtconv.load.save import _with_raw_data

EXAMPLE = Path(__file__).parents[1] / "examples" / "makefile"
MAKE = shutil.which("make")
TRTCONV = shutil.which("trtconv")
pytestmark = pytest.mark.skipif(MAKE is None or TRTCONV is None,
                                reason="needs GNU make and the trtconv console script (make install)")


def make(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRTCONV": TRTCONV or "trtconv"}
    env.pop("TRTCONV_RESULT_CACHE_DIR", None)
    env.pop("MAKEFLAGS", None)
    return subprocess.run([MAKE or "make", *args], cwd=folder, capture_output=True, text=True, env=env, timeout=300)


def up_to_date(folder: Path, *targets: str) -> bool:
    res = make(folder, "-q", *targets)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode == 0


def age_everything(folder: Path) -> None:
    """Inputs (files and folders) 200 s old, outputs 100 s old: up to date, and a touch is clearly newer."""
    now = time.time()
    for p in folder.rglob("*"):
        if ".trtconv-cache" not in p.parts:
            t = now - (100 if p.name.startswith("cls.fp16") or p.name.startswith("cls.prepared") else 200)
            os.utime(p, (t, t))


@pytest.fixture
def project(tmp_path: Path, ocr_cls: Path) -> Path:
    from realdata import ocr_line_images

    for name in ("Makefile", "quantize.toml", "build.toml"):
        shutil.copyfile(EXAMPLE / name, tmp_path / name)
    # the PP-OCR classifier with its weights in an external-data file, which must be tracked too
    onnx.save_model(_with_raw_data(onnx.load(ocr_cls)), tmp_path / "cls.onnx", save_as_external_data=True,
                    location="cls.onnx.data", size_threshold=1024, convert_attribute=True)
    ocr_line_images(tmp_path / "lines", range(2), flip_every=2)
    return tmp_path


def test_makefile_rebuilds_exactly_when_an_input_changes(project: Path):
    first = make(project, "-j2", "fp16", "prepared")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (project / "cls.fp16.onnx").is_file() and (project / "cls.prepared.onnx").is_file()
    head = (project / "cls.fp16.onnx.d").read_text().split("\n\n")[0].splitlines()
    assert head[0] == "cls.fp16.onnx: \\"
    assert [line.strip(" \\") for line in head[1:]] == [
        "cls.onnx", "cls.onnx.data", "lines", "lines/000.png", "lines/001.png", "quantize.toml"]
    assert "build.toml" in (project / "cls.prepared.onnx.d").read_text()
    assert up_to_date(project, "fp16", "prepared")

    for touched in ("cls.onnx", "cls.onnx.data", "lines/001.png", "quantize.toml"):
        age_everything(project)
        assert up_to_date(project, "fp16")
        os.utime(project / touched)  # newer, same bytes (a folder: as when a file is added to it)
        assert not up_to_date(project, "fp16"), f"touching {touched} did not make cls.fp16.onnx stale"
        again = make(project, "fp16")
        assert again.returncode == 0, again.stderr
        assert "trtconv quantize" in again.stdout
        assert "cache hit" in again.stderr, f"{touched}: same contents should be a cache hit\n{again.stderr}"
        assert up_to_date(project, "fp16")

    # a real change of a setting: a real run, and only the targets that use that spec
    age_everything(project)
    spec = project / "quantize.toml"
    spec.write_text(spec.read_text().replace("min-cosine = 0.999", "min-cosine = 0.99"))
    assert not up_to_date(project, "fp16") and up_to_date(project, "prepared")
    changed = make(project, "fp16")
    assert changed.returncode == 0, changed.stderr
    assert "cache hit" not in changed.stderr and "wrote cls.fp16.onnx" in changed.stdout


def test_accuracy_gate_fails_the_rule_and_leaves_no_target(project: Path):
    spec = project / "quantize.toml"
    spec.write_text(spec.read_text().replace("min-cosine = 0.999", "max-abs = 1e-9"))
    res = make(project, "fp16")
    assert res.returncode != 0
    assert "Error 7" in res.stderr  # trtconv's exit code 7 (ACCURACY), as make reports it
    assert not (project / "cls.fp16.onnx").exists() and not (project / "cls.fp16.onnx.d").exists()


def test_engine_rule_is_the_same_build_command(project: Path):
    res = make(project, "-n", "engines")
    assert res.returncode == 0, res.stderr
    assert "trtconv build cls.onnx -o cls.engine --config build.toml --force --deps cls.engine.d" in \
        res.stdout.replace(TRTCONV or "trtconv", "trtconv")
