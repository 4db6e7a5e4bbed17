"""Stage 1: loading real models, external data, and the refusals."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.errors import ExitCode, InvalidModelError, UsageError
from trtconv.load import infer_shapes, load_model, parse_shapes, save_model, summarize
from trtconv.load.shapes import dynamic_inputs, override_input_shapes, value_shapes


def _external_model(tmp_path: Path, location: str = "weights.bin") -> Path:
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    if location != "weights.bin":
        m2 = onnx.load(str(path), load_external_data=False)
        for t in m2.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
        onnx.save_model(m2, str(path))
    return path


def test_real_model_loads_with_summary(ocr_det):
    loaded = load_model(ocr_det)
    s = summarize(loaded)
    assert s.opsets["ai.onnx"] == 12
    assert s.inputs == ("x",)
    assert s.nodes > 500
    assert loaded.checker_error is None
    assert "x" in dynamic_inputs(loaded.proto)


def test_shape_inference_fills_real_model(ocr_cls):
    loaded = load_model(ocr_cls)
    fixed = override_input_shapes(loaded.proto, {"x": (1, 3, 48, 192)})
    inferred = infer_shapes(loaded, fixed)
    shapes = value_shapes(inferred)
    first_conv = next(n for n in inferred.graph.node if n.op_type == "Conv")
    assert shapes[first_conv.output[0]] == [1, 8, 24, 96]
    mid = inferred.graph.node[len(inferred.graph.node) // 2].output[0]
    assert all(isinstance(d, int) for d in shapes[mid])


def test_external_data_loads(tmp_path):
    path = _external_model(tmp_path)
    loaded = load_model(path)
    assert loaded.weights_loaded
    arr = numpy_helper.to_array(loaded.proto.graph.initializer[0])
    assert arr[63, 63] == 4095
    lazy = load_model(path, load_weights=False)
    assert not lazy.weights_loaded and lazy.external_files == (tmp_path / "weights.bin",)


@pytest.mark.parametrize("location", ["../weights.bin", "/etc/passwd", "sub/../../weights.bin"])
def test_external_data_escaping_folder_is_refused(tmp_path, location):
    path = _external_model(tmp_path, location)
    with pytest.raises(InvalidModelError, match="escapes the model's folder"):
        load_model(path)


def test_external_data_symlink_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    inner = tmp_path / "model"
    inner.mkdir()
    path = _external_model(inner)
    (inner / "weights.bin").rename(outside / "weights.bin")
    os.symlink(outside / "weights.bin", inner / "weights.bin")
    with pytest.raises(InvalidModelError, match="outside the model's folder"):
        load_model(path)


def test_missing_external_data(tmp_path):
    path = _external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(InvalidModelError, match="not found") as info:
        load_model(path)
    assert info.value.exit_code == ExitCode.INVALID_MODEL


def test_truncated_external_data(tmp_path):
    path = _external_model(tmp_path)
    data = (tmp_path / "weights.bin").read_bytes()
    (tmp_path / "weights.bin").write_bytes(data[:100])
    with pytest.raises(InvalidModelError, match="past the end"):
        load_model(path)


def test_truncated_and_non_onnx_files(tmp_path, ocr_cls):
    trunc = tmp_path / "t.onnx"
    trunc.write_bytes(ocr_cls.read_bytes()[:5000])
    with pytest.raises(InvalidModelError):
        load_model(trunc)
    text = tmp_path / "x.onnx"
    text.write_text("this is not a model\n" * 10)
    with pytest.raises(InvalidModelError):
        load_model(text)
    with pytest.raises(UsageError):
        load_model(tmp_path / "absent.onnx")


def test_save_is_atomic_and_needs_force(tmp_path, ocr_cls):
    loaded = load_model(ocr_cls)
    out = tmp_path / "out.onnx"
    save_model(loaded.proto, out)
    with pytest.raises(UsageError, match="already exists") as info:
        save_model(loaded.proto, out)
    assert "--force" in (info.value.hint or "")
    save_model(loaded.proto, out, force=True)
    assert load_model(out).proto.graph == loaded.proto.graph
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trtconv-tmp-")]


def test_save_external_data_roundtrip(tmp_path):
    src = load_model(_external_model(tmp_path))
    out = tmp_path / "copy.onnx"
    save_model(src.proto, out, external_data=True)
    again = load_model(out)
    assert [r.location for r in again.external_refs] == ["copy.onnx.data"]
    assert numpy_helper.to_array(again.proto.graph.initializer[0])[1, 2] == 66
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trtconv-tmp-")]


def test_parse_shapes():
    assert parse_shapes("x:1x3x224x224,input:0:1x16") == {"x": (1, 3, 224, 224), "input:0": (1, 16)}
    for bad in ("x", "x:1x", "x:ax3", ":1x2"):
        with pytest.raises(UsageError):
            parse_shapes(bad)
    with pytest.raises(UsageError, match="given twice") as twice:  # a range written as two shapes
        parse_shapes("bytes:1x2048,bytes:8x2048")
    assert "--min-shapes" in (twice.value.hint or "")


def test_checker_note_is_whole_when_onnx_names_a_node_over_several_lines(tmp_path):
    """onnx.checker's message for an unsorted graph spans lines ("of node: \\nname: ..."): kept whole."""
    g = helper.make_graph([helper.make_node("Relu", ["a"], ["b"], name="second"),
                           helper.make_node("Relu", ["x"], ["a"], name="first")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    path = tmp_path / "unsorted.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    note = load_model(path).checker_error
    assert note is not None and "\n" not in note
    assert note.endswith("of node: name: second OpType: Relu is not output of any previous nodes."), note
