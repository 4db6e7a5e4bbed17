"""External data from strangers: escapes are refused end to end, huge sizes never allocate.

Every command that reads a model goes through trtconv.load; these tests drive the real
CLI (check, rewrite, quantize) so a command that bypassed the loader would fail here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from trtconv.cli.main import cli
from trtconv.errors import ExitCode, InvalidModelError
from trtconv.load import load_model
from trtconv.load.external import ExternalRef, validate_external_refs
from trtconv.load.validate import check_tensor_sizes

COMMANDS = {
    "check": lambda m, o: ["check", str(m), "--json"],
    "rewrite": lambda m, o: ["rewrite", str(m), "-o", str(o)],
    "quantize": lambda m, o: ["quantize", str(m), "--precision", "fp16", "-o", str(o)],
}


def _model(folder: Path, *, location: str = "w.bin", offset: int = 0, length: int | None = None) -> Path:
    """A MatMul whose 64x64 weight lives in external data at ``location``."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096, "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    m2 = onnx.load(str(path), load_external_data=False)
    t = m2.graph.initializer[0]
    del t.external_data[:]
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    onnx.save_model(m2, str(path))
    return path


def _run(args: list[str]):
    res = CliRunner().invoke(cli, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "sub/../../w.bin", "..\\w.bin"])
def test_escaping_location_refused_by_every_command(tmp_path, command, location):
    model = _model(tmp_path / "model", location=location)
    (tmp_path / "w.bin").write_bytes(b"\0" * 16384)  # the escape target exists
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    res = _run(COMMANDS[command](model, out))
    assert res.exit_code == ExitCode.INVALID_MODEL, res.output
    assert "escapes the model's folder" in res.stderr
    assert "Traceback" not in res.stderr
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_symlink_out_of_folder_refused_by_every_command(tmp_path, command):
    model = _model(tmp_path / "model")
    outside = tmp_path / "secret.bin"
    os.replace(tmp_path / "model" / "w.bin", outside)
    os.symlink(outside, tmp_path / "model" / "w.bin")
    res = _run(COMMANDS[command](model, tmp_path / "o.onnx"))
    assert res.exit_code == ExitCode.INVALID_MODEL, res.output
    assert "outside the model's folder" in res.stderr


@pytest.mark.parametrize("field", ["length", "offset"])
def test_huge_declared_length_fails_fast_without_allocating(tmp_path, field):
    """A tensor declaring 2**62 bytes: a clear error in well under a second, no MemoryError."""
    kwargs = {"length": 2**62} if field == "length" else {"offset": 2**62, "length": 16384}
    model = _model(tmp_path, **kwargs)
    for command in sorted(COMMANDS):
        start = time.monotonic()
        res = _run(COMMANDS[command](model, tmp_path / f"{command}.onnx"))
        assert time.monotonic() - start < 5
        assert res.exit_code == ExitCode.INVALID_MODEL, res.output
        assert "past the end" in res.stderr and "MemoryError" not in res.stderr


def test_huge_declared_dims_with_small_data_are_refused(tmp_path):
    """A 16-byte tensor declaring 2**40 elements: refused before shape inference sees it
    (onnx's data propagation spins for minutes on such a Constant)."""
    model = _model(tmp_path)
    m = onnx.load(str(model), load_external_data=False)
    m.graph.node.insert(0, helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
        "c", TensorProto.FLOAT, [4], [1, 2, 3, 4])))
    m.graph.node[0].attribute[0].t.dims[0] = 2**40
    onnx.save_model(m, str(model))
    start = time.monotonic()
    res = _run(["check", str(model)])
    assert time.monotonic() - start < 5
    assert res.exit_code == ExitCode.INVALID_MODEL
    assert "1099511627776" in res.stderr


def test_length_within_file_but_dims_larger_is_refused(tmp_path):
    model = _model(tmp_path, length=64)  # the 64x64 float tensor needs 16384 bytes
    with pytest.raises(InvalidModelError, match="16384 bytes"):
        load_model(model)


_locations = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(["..", ".", "w.bin", "sub", "", "/", "\\", "\0", "~"]), max_size=6).map("/".join),
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(location=_locations, offset=st.integers(-(2**64), 2**64), length=st.one_of(st.none(), st.integers(-(2**64), 2**64)))
def test_validate_external_refs_property(tmp_path, location, offset, length):
    """Whatever a file declares: either a location inside the folder with a range inside
    the file, or InvalidModelError. Never another exception."""
    base = tmp_path / "m"
    base.mkdir(exist_ok=True)
    (base / "w.bin").write_bytes(b"\0" * 1000)
    ref = ExternalRef("t", location, offset, length)
    try:
        validate_external_refs([ref], base)
    except InvalidModelError:
        return
    target = (base / location).resolve()
    assert base.resolve() in target.parents and target.is_file()
    assert 0 <= offset <= 1000 and (length is None or 0 <= offset + length <= 1000)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    dtype=st.sampled_from([v for _, v in TensorProto.DataType.items()] + [99]),
    dims=st.lists(st.integers(-3, 2**62), max_size=4),
    raw=st.binary(max_size=64),
)
def test_check_tensor_sizes_property(dtype, dims, raw):
    """Declared size vs carried data: accepted tensors convert with numpy; others raise InvalidModelError."""
    t = TensorProto(name="t", data_type=dtype, dims=dims)
    if dtype != TensorProto.STRING:
        t.raw_data = raw
    m = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    try:
        check_tensor_sizes(m)
    except InvalidModelError:
        return
    if dtype not in (TensorProto.UNDEFINED, TensorProto.STRING):
        arr = numpy_helper.to_array(t)
        assert arr.size == int(np.prod(dims)) if dims else arr.size == 1


@settings(max_examples=300, deadline=None, derandomize=True)
@given(spec=st.one_of(
    st.text(max_size=40),
    st.lists(st.tuples(st.sampled_from(["x", "input:0", "a b", ""]),
                       st.lists(st.integers(0, 2**70), min_size=0, max_size=5)), max_size=3).map(
        lambda items: ",".join(f"{n}:{'x'.join(map(str, ds))}" for n, ds in items)),
))
def test_parse_shapes_property(spec):
    """--shapes from a user: a dict of int32-sized dims, or UsageError; nothing else."""
    from trtconv.errors import UsageError
    from trtconv.load import parse_shapes

    try:
        shapes = parse_shapes(spec)
    except UsageError:
        return
    for name, dims in shapes.items():
        assert name and all(isinstance(d, int) and 0 <= d < 2**31 for d in dims)
