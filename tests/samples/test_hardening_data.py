"""Calibration and input data from strangers, through the real `trtconv quantize` CLI.

Every bad sample gives exit 11 (BAD_DATA) with a one-line error naming the file; pickles
are refused; Python in a data folder never runs unless --calib-loader names it.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from trtconv.cli.main import cli
from trtconv.errors import ExitCode

SHAPES = "x:1x3x48x192"
SHAPE = (1, 3, 48, 192)


def _good(rng: np.random.Generator) -> np.ndarray:
    return rng.random(SHAPE, dtype=np.float32)


def _huge_header_npy(path: Path) -> None:
    """A 40-byte .npy whose header declares 2**40 x 3 x 48 x 192 floats."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": (2**40, *SHAPE[1:])})
    path.write_bytes(out.getvalue() + b"\0" * 40)


def _bad(kind: str, folder: Path) -> Path:
    """Write two good samples and one bad one into ``folder``; return the bad file."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for i in range(2):
        np.save(folder / f"good{i}.npy", _good(rng))
    bad = folder / ("bad.npz" if kind.startswith("npz") else "bad.png" if kind == "image" else "bad.npy")
    if kind == "shape":  # H and W are dynamic in this model; the channel count is not
        np.save(bad, rng.random((1, 4, 48, 192), dtype=np.float32))
    elif kind == "rank":
        np.save(bad, rng.random((3, 48, 192), dtype=np.float32))
    elif kind == "dtype":
        np.save(bad, np.full(SHAPE, "a", dtype="<U1"))
    elif kind == "nan":
        arr = _good(rng)
        arr[0, 1, 2, 3] = np.nan
        np.save(bad, arr)
    elif kind == "inf":
        arr = _good(rng)
        arr[0, 0, 0, 0] = -np.inf
        np.save(bad, arr)
    elif kind == "truncated":
        np.save(bad, _good(rng))
        bad.write_bytes(bad.read_bytes()[:1000])
    elif kind == "garbage":
        bad.write_bytes(b"\x93NUMPY garbage" * 10)
    elif kind == "pickle":
        np.save(bad, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    elif kind == "npz-pickle":
        np.savez(bad, x=np.array([{"x": 1}], dtype=object))
    elif kind == "npz-corrupt":
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("x.npy", b"not numpy")
    elif kind == "npz-wrong-name":
        np.savez(bad, images=_good(rng))
    elif kind == "image":
        bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    elif kind == "huge-header":
        _huge_header_npy(bad)
    elif kind == "empty":
        np.save(bad, np.zeros((0, 3, 48, 192), np.float32))
    elif kind == "broken-header":  # numpy tokenizes the header dict; an unclosed brace breaks that
        np.save(bad, _good(rng))
        data = bad.read_bytes()
        bad.write_bytes(data.replace(b"}", b" ", 1))
    else:
        raise ValueError(kind)
    return bad


def _quantize(model: Path, tmp_path: Path, *extra: str, precision: str = "int8"):
    out = tmp_path / "q.onnx"
    # a handful of files: too few for the gate's claim (exit 11 before any sample is read), and the subject here
    # is how a bad one is named, so INT8 goes on unverified
    unverified = ("--int8-unverified",) if precision == "int8" else ()
    res = CliRunner().invoke(cli, ["quantize", str(model), "--precision", precision, "-o", str(out),
                                   "--shapes", SHAPES, *unverified, *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.stderr
    return res, out


KINDS = ["shape", "rank", "dtype", "nan", "inf", "truncated", "garbage", "pickle", "npz-pickle", "npz-corrupt",
         "npz-wrong-name", "huge-header", "broken-header", "empty"]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_sample_is_bad_data_naming_the_file(tmp_path, ocr_cls, kind):
    bad = _bad(kind, tmp_path / "calib")
    res, out = _quantize(ocr_cls, tmp_path, "--calib-data", str(tmp_path / "calib"))
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    errors = [line for line in res.stderr.splitlines() if line.startswith("trtconv: error:")]
    assert len(errors) == 1 and bad.name in errors[0], res.stderr
    assert not out.exists()


def test_corrupt_image_names_the_file(tmp_path, ocr_cls):
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(folder), "--preprocess", "preset=ppocr-cls")
    assert res.exit_code == ExitCode.BAD_DATA, res.output
    assert "broken.png" in res.stderr


def test_empty_folder_and_missing_folder(tmp_path, ocr_cls):
    (tmp_path / "empty").mkdir()
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(tmp_path / "empty"))
    assert res.exit_code == ExitCode.BAD_DATA and "empty" in res.stderr
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(tmp_path / "absent"))
    assert res.exit_code in (ExitCode.BAD_DATA, ExitCode.USAGE) and "absent" in res.stderr


@pytest.mark.parametrize("kind", ["nan", "empty"])
def test_fp16_checks_its_sample_data_too(tmp_path, ocr_cls, kind):
    bad = _bad(kind, tmp_path / "calib")
    res, out = _quantize(ocr_cls, tmp_path, "--calib-data", str(tmp_path / "calib"), precision="fp16")
    assert res.exit_code == ExitCode.BAD_DATA and bad.name in res.stderr
    assert not out.exists()


LOADER = """
from pathlib import Path
Path(__file__).with_name("RAN").write_text("loader code ran")
import numpy as np
def samples(inputs):
    rng = np.random.default_rng(0)
    for _ in range(3):
        yield {"x": rng.random((1, 3, 48, 192), dtype=np.float32)}
"""


def test_python_runs_only_behind_calib_loader(tmp_path, ocr_cls):
    folder = tmp_path / "calib"
    folder.mkdir()
    (folder / "samples.py").write_text(LOADER)
    marker = folder / "RAN"
    # A folder holding only Python is not sample data, and its code does not run.
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(folder))
    assert res.exit_code in (ExitCode.BAD_DATA, ExitCode.USAGE) and not marker.exists()
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(folder / "samples.py"))
    assert res.exit_code in (ExitCode.BAD_DATA, ExitCode.USAGE) and not marker.exists()
    assert "--calib-loader" in res.stderr
    # With samples beside it, the .py is ignored, still not run.
    np.save(folder / "s.npy", np.random.default_rng(1).random(SHAPE, dtype=np.float32))
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-data", str(folder), "--calib-method", "minmax")
    assert res.exit_code == 0, res.output
    assert not marker.exists()
    # The explicit flag is the one way in.
    res, _ = _quantize(ocr_cls, tmp_path, "--calib-loader", str(folder / "samples.py"),
                       "--calib-method", "minmax", "--force")
    assert res.exit_code == 0, res.output
    assert marker.read_text() == "loader code ran"


BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi")
)  # "billion laughs": 9**9 leaves if anything expanded the aliases

PLUGIN_MAPS = {
    "alias-bomb": BOMB.encode(),
    "python-tag": b'- !!python/object/apply:os.system ["touch RAN"]\n',
    "undefined-alias": b"ops:\n  Conv: {plugin: x, version: *v}\n",
    "wrong-structure": b"ops: [1, 2]\n",
    "deep-nesting": b"ops: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "not-utf8": b"\x00\xff\xfe",
}


@pytest.mark.parametrize("kind", sorted(PLUGIN_MAPS))
def test_hostile_plugin_map_is_usage_error(tmp_path, ocr_cls, kind, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pmap = tmp_path / "map.yaml"
    pmap.write_bytes(PLUGIN_MAPS[kind])
    res = CliRunner().invoke(cli, ["rewrite", str(ocr_cls), "-o", str(tmp_path / "o.onnx"), "--no-verify",
                                   "--plugin-map", str(pmap)])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "Traceback" not in res.stderr and "map.yaml" in res.stderr
    assert not (tmp_path / "RAN").exists() and not (tmp_path / "o.onnx").exists()


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_random_data_too_large_for_memory_is_a_clear_error(tmp_path, ocr_cls, precision):
    """--random-data with --shapes far beyond memory: one line and exit 2 or 11 (under a 6 GiB cap)."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "trtconv", "quantize", str(ocr_cls), "--precision", precision,
                          "--random-data", "1", "--shapes", "x:1x3x99999x99999", "-o", str(tmp_path / "q.onnx")],
                         capture_output=True, text=True, preexec_fn=_limit_memory, timeout=300)
    assert res.returncode in (ExitCode.USAGE, ExitCode.BAD_DATA), res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "fit" in res.stderr
