"""Sample data as users have it: one .npz of many samples, extra keys, mixed folders, letterboxed images."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from realdata import silero_samples

from trtconv.cli.main import cli
from trtconv.errors import DataError
from trtconv.samples.sources import (
    ImagePreprocess,
    InputSpec,
    SampleSet,
    SampleSource,
    count_samples,
    iter_samples,
    load_image,
)

F32 = np.dtype(np.float32)
ONE = {"x": InputSpec(F32, (1, "T"))}


def test_one_npz_holding_many_samples(tmp_path):
    path = tmp_path / "all.npz"
    np.savez(path, **{f"{i:03d}/x": np.full((1, 3 + i), i, np.float32) for i in range(5)})
    src = SampleSource.detect(path)
    assert count_samples(src) == 5
    got = list(iter_samples(src, ONE))
    assert [s["x"].shape for s in got] == [(1, 3), (1, 4), (1, 5), (1, 6), (1, 7)]
    calib, held = SampleSet(src, ONE).split(2)
    assert [int(s["x"][0, 0]) for s in held] == [3, 4] and len(calib) == 3
    assert calib.digest() != held.digest()
    assert [o for o, _ in held.with_origin()] == [f"{path}[003]", f"{path}[004]"]


def test_npz_layout_errors_say_what_is_expected(tmp_path):
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, **{"000/x": np.ones((1, 2), np.float32), "x": np.ones((1, 2), np.float32)})
    with pytest.raises(DataError, match="mixes grouped keys") as info:
        list(iter_samples(SampleSource.detect(mixed), ONE))
    assert "000/images" in (info.value.hint or "")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, images=np.ones((1, 2), np.float32))
    with pytest.raises(DataError, match="missing input") as info:
        list(iter_samples(SampleSource.detect(wrong), ONE))
    assert "it has 'images'" in str(info.value) and "000/x, 001/x" in (info.value.hint or "")


def test_extra_keys_are_ignored_with_one_note(tmp_path, caplog):
    for i in range(3):
        np.savez(tmp_path / f"{i}.npz", x=np.ones((1, 2), np.float32), label=np.array(i), boxes=np.zeros(4))
    with caplog.at_level(logging.WARNING, logger="trtconv.samples.sources"):
        got = list(iter_samples(SampleSource.detect(tmp_path), ONE))
    assert [set(s) for s in got] == [{"x"}] * 3
    notes = [r.getMessage() for r in caplog.records if "ignoring key(s)" in r.getMessage()]
    assert len(notes) == 1 and "'boxes', 'label'" in notes[0] and "inputs: x" in notes[0]


def test_a_folder_mixing_images_and_arrays_is_refused(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 8)).save(tmp_path / "b.png")
    np.save(tmp_path / "stray.npy", np.ones((1, 3, 8, 8), np.float32))
    with pytest.raises(DataError, match=r"mixes 1 array file\(s\) \(.npy/.npz\) and 2 image\(s\)") as info:
        SampleSource.detect(tmp_path)
    assert "separate folders" in (info.value.hint or "")


def test_yolo_letterbox_keeps_the_aspect_ratio_and_pads_with_gray(tmp_path):
    Image.new("RGB", (200, 100), (255, 0, 0)).save(tmp_path / "wide.png")  # W=200, H=100
    pp = ImagePreprocess.preset("yolo")
    x = load_image(tmp_path / "wide.png", pp, InputSpec(F32, (1, 3, 640, 640)))
    assert x.shape == (1, 3, 640, 640)
    pad = np.float32(114 / 255)
    assert np.allclose(x[0, :, :160, :], pad) and np.allclose(x[0, :, 480:, :], pad)
    assert np.allclose(x[0, 0, 160:480, :], 1.0) and np.allclose(x[0, 1:, 160:480, :], 0.0)  # red, RGB order
    free = load_image(tmp_path / "wide.png", ImagePreprocess.parse("preset=yolo,size=xN,pad=0"),
                      InputSpec(F32, (1, 3, "H", "W")))
    assert free.shape == (1, 3, 96, 192)  # free dims: the image's own size rounded to a multiple of 32
    assert ImagePreprocess.parse("preset=yolo,letterbox=no").letterbox is False


def test_quantize_reads_one_npz_of_many_samples(silero, tmp_path, caplog):
    samples = silero_samples(silero, range(1), seconds=1.5, every=3)
    path = tmp_path / "vad.npz"
    np.savez(path, **{f"{i:03d}/{k}": v for i, s in enumerate(samples) for k, v in s.items()},
             **{f"{i:03d}/note": np.array(i) for i in range(len(samples))})
    res = CliRunner().invoke(cli, ["quantize", str(silero), "-o", str(tmp_path / "q.onnx"), "--precision", "int8",
                                   "--calib-data", str(path), "--min-cosine", "0.9", "--json",
                                   "--calib-method", "minmax"])  # how samples are read is under test
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    n = len(samples)
    assert doc["samples"]["accuracy_samples"] == n - int(n * 0.8) and doc["accuracy_check"] == "held-out data"
    assert any("ignoring key(s) 'note'" in r.getMessage() for r in caplog.records)
