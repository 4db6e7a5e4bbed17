"""Sample loading: every source kind, and one-line DataErrors that name the bad file."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
from realdata import ocr_line_images

from trtconv.errors import DataError, ExitCode, UsageError
from trtconv.samples.sources import (
    ImagePreprocess,
    InputSpec,
    SampleSet,
    SampleSource,
    count_samples,
    dataset_hash,
    iter_samples,
    load_image,
)

F32 = np.dtype(np.float32)
IMG = {"x": InputSpec(F32, ("N", 3, 48, "W"))}
TWO = {"a": InputSpec(F32, (1, 4)), "b": InputSpec(np.dtype(np.int64), (1, "T"))}


def _err(source, inputs) -> DataError:
    with pytest.raises(DataError) as info:
        list(iter_samples(source, inputs))
    assert info.value.exit_code == ExitCode.BAD_DATA == 11
    assert "\n" not in str(info.value)
    return info.value


def test_npz_and_npy_folders_keep_each_samples_shape(tmp_path):
    for i, t in enumerate((3, 7, 5)):
        np.savez(tmp_path / f"s{i}.npz", a=np.full((1, 4), i, np.float32), b=np.arange(t, dtype=np.int64)[None])
    src = SampleSource.detect(tmp_path)
    assert src.kind == "npy" and count_samples(src) == 3
    got = list(iter_samples(src, TWO))
    assert [s["b"].shape for s in got] == [(1, 3), (1, 7), (1, 5)]  # never cropped or padded
    one = tmp_path / "single"
    one.mkdir()
    np.save(one / "x.npy", np.ones((1, 4), np.float32))
    assert list(iter_samples(SampleSource.detect(one), {"a": TWO["a"]}))[0]["a"].shape == (1, 4)


def test_bad_arrays_name_the_file(tmp_path):
    np.savez(tmp_path / "ok.npz", a=np.ones((1, 4), np.float32), b=np.ones((1, 2), np.int64))
    cases = {
        "shape.npz": dict(a=np.ones((1, 5), np.float32), b=np.ones((1, 2), np.int64)),
        "dtype.npz": dict(a=np.ones((1, 4), np.float64), b=np.ones((1, 2), np.int64)),
        "nan.npz": dict(a=np.array([[1, np.nan, 2, 3]], np.float32), b=np.ones((1, 2), np.int64)),
        "missing.npz": dict(a=np.ones((1, 4), np.float32)),
        "rank.npz": dict(a=np.ones((4,), np.float32), b=np.ones((1, 2), np.int64)),
    }
    expect = {"shape.npz": "fixes dim 1 to 4", "dtype.npz": "dtype float64", "nan.npz": "1 NaN/Inf",
              "missing.npz": "missing input(s) 'b'", "rank.npz": "rank 1"}
    for name, arrays in cases.items():
        d = tmp_path / name.split(".")[0]
        d.mkdir()
        np.savez(d / name, **arrays)
        err = _err(SampleSource.detect(d), TWO)
        assert name in str(err) and expect[name] in str(err), str(err)
        if name in ("shape.npz", "rank.npz"):  # what to do, in the model's own dims (not "include the batch")
            assert err.hint == "give samples of shape 1x4, the model's fixed dims as they are" if name == "shape.npz" \
                else err.hint == "include the batch dimension", err.hint
    batch = tmp_path / "batch"
    batch.mkdir()
    np.save(batch / "one.npy", np.ones((1, 3, 8, 8), np.float32))  # what an image makes, for a batch-10 model
    hint = _err(SampleSource.detect(batch), {"x": InputSpec(F32, (10, 3, 8, 8))}).hint
    assert hint == ("give samples of shape 10x3x8x8, the model's fixed dims as they are; an image is one sample of "
                    "batch 1: stack 10 into each .npy (or yield them from --calib-loader)"), hint
    pick = tmp_path / "pickle"
    pick.mkdir()
    np.save(pick / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "obj.npy" in str(_err(SampleSource.detect(pick), {"a": TWO["a"]}))
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "t.npy").write_bytes((tmp_path / "ok.npz").read_bytes()[:40])
    assert "t.npy" in str(_err(SampleSource("npy", trunc), {"a": TWO["a"]}))
    huge = tmp_path / "huge"
    huge.mkdir()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 4)})
    (huge / "h.npy").write_bytes(header.getvalue() + b"\0" * 16)  # numpy would allocate 16 TiB
    assert "header declares shape" in str(_err(SampleSource("npy", huge), {"a": TWO["a"]}))


def test_empty_folder_and_unreadable_image(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no samples found"):
        SampleSource.detect(empty)
    assert "holds no sample files" in str(_err(SampleSource("images", empty, ImagePreprocess()), IMG))
    imgs = tmp_path / "imgs"
    ocr_line_images(imgs, range(2))
    (imgs / "zz_broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    err = _err(SampleSource.detect(imgs, ImagePreprocess.preset("ppocr-rec")), IMG)
    assert "zz_broken.png" in str(err) and "cannot read image" in str(err)


def test_image_preprocessing_matches_ppocr_recipe(tmp_path):
    from PIL import Image

    arr = np.zeros((10, 20, 3), np.uint8)
    arr[..., 0] = 255  # pure red
    Image.fromarray(arr).save(tmp_path / "red.png")
    x = load_image(tmp_path / "red.png", ImagePreprocess.preset("ppocr-rec"), IMG["x"])
    assert x.shape == (1, 3, 48, 96) and x.dtype == np.float32  # height 48, width keeps the aspect ratio
    # BGR order: channel 2 is red -> (1 - 0.5) / 0.5 = 1; the others (0 - 0.5) / 0.5 = -1
    assert np.allclose(x[0, 2], 1.0) and np.allclose(x[0, :2], -1.0)
    det = ImagePreprocess.parse("preset=ppocr-det,max_side=40")
    y = load_image(tmp_path / "red.png", det, InputSpec(F32, ("N", 3, "H", "W")))
    assert y.shape == (1, 3, 32, 32)  # multiples of 32
    assert np.allclose(y[0, 2], (1 - 0.406) / 0.225, atol=1e-5)
    nhwc = ImagePreprocess.parse("size=8x8,layout=nhwc,order=rgb,scale=1/255")
    z = load_image(tmp_path / "red.png", nhwc, InputSpec(F32, (1, 8, 8, 3)))
    assert z.shape == (1, 8, 8, 3) and np.allclose(z[..., 0], 1.0)
    with pytest.raises(UsageError):
        ImagePreprocess.parse("size=48x48,colour=red")
    # a bare preset name, as `--help` lists the presets, is that preset; a bare unknown word is still refused
    assert ImagePreprocess.parse("ppocr-cls") == ImagePreprocess.preset("ppocr-cls")
    assert ImagePreprocess.parse("ppocr-det,max_side=40") == det
    with pytest.raises(UsageError, match="bad preprocessing item 'ppocr'"):
        ImagePreprocess.parse("ppocr")


def test_loader_module_and_random_source(tmp_path):
    loader = tmp_path / "load.py"
    loader.write_text(
        "import numpy as np\n"
        "def samples(inputs):\n"
        "    for t in (2, 3):\n"
        "        yield {'a': np.ones((1, 4), np.float32), 'b': np.zeros((1, t), np.int64)}\n"
    )
    got = list(iter_samples(SampleSource.loader(loader), TWO))
    assert [s["b"].shape for s in got] == [(1, 2), (1, 3)]
    bad = tmp_path / "bad.py"
    bad.write_text("def samples():\n    yield {'a': 1}\n")
    assert "bad.py" in str(_err(SampleSource.loader(bad), TWO))
    empty = tmp_path / "empty.py"
    empty.write_text("def samples():\n    return iter(())\n")
    assert "yielded no samples" in str(_err(SampleSource.loader(empty), TWO))
    with pytest.warns(UserWarning, match="RANDOM data"):
        rnd = list(iter_samples(SampleSource.random(3, shapes={"b": (1, 6)}), TWO))
    assert len(rnd) == 3 and rnd[0]["b"].shape == (1, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = list(iter_samples(SampleSource.random(3, shapes={"b": (1, 6)}), TWO))
    assert np.array_equal(rnd[2]["a"], again[2]["a"])  # seeded


def test_dataset_hash_tracks_content_and_split_holds_out(tmp_path):
    for i in range(5):
        np.save(tmp_path / f"{i}.npy", np.full((1, 4), i, np.float32))
    src = SampleSource.detect(tmp_path)
    h1 = dataset_hash(src)
    assert dataset_hash(src) == h1
    np.save(tmp_path / "3.npy", np.full((1, 4), 9, np.float32))
    assert dataset_hash(src) != h1
    calib, held = SampleSet(src, {"a": TWO["a"]}).split(2)
    assert len(calib) == 3 and len(held) == 2
    assert [float(s["a"][0, 0]) for s in held] == [9.0, 4.0]
    assert calib.digest() != held.digest()


def test_detect_refuses_python_without_flag(tmp_path: Path):
    f = tmp_path / "x.py"
    f.write_text("")
    with pytest.raises(UsageError, match="Python code"):
        SampleSource.detect(f)


def test_a_sample_onnx_runtime_rejects_is_named(tmp_path, ocr_det):
    """Right rank and dtype, but a size the detector's FPN cannot add up: the error names the file."""
    import onnx

    from trtconv.precision.int8 import Int8Settings, quantize_int8
    from trtconv.samples.sources import model_inputs

    model = onnx.load(str(ocr_det))
    np.save(tmp_path / "a.npy", np.zeros((1, 3, 64, 64), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((1, 3, 5, 7), np.float32))
    samples = SampleSet(SampleSource.detect(tmp_path), model_inputs(model))
    with pytest.raises(DataError) as info:
        quantize_int8(model, Int8Settings(unverified=True, method="minmax"), samples)
    assert "b.npy: ONNX Runtime failed on this sample" in str(info.value) and "\n" not in str(info.value)
