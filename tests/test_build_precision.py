"""The achieved-precision check, on inspector JSON built from the documented 10.x and 11.x schemas."""

from __future__ import annotations

import json

import pytest

from trtconv.build.precision_check import assert_precision, layer_dtype, summarize_inspector, tensor_dtype
from trtconv.errors import ExitCode, PrecisionNotAchievedError


def layer10(name: str, kind: str, fmt_in: str, fmt_out: str) -> dict:
    """A DETAILED-verbosity layer as TensorRT 10.x prints it ("Format/Datatype" strings)."""
    return {"Name": name, "LayerType": kind,
            "Inputs": [{"Name": f"{name}_in", "Location": "Device", "Dimensions": [1, 8, 4, 4],
                        "Format/Datatype": fmt_in}],
            "Outputs": [{"Name": f"{name}_out", "Location": "Device", "Dimensions": [1, 8, 4, 4],
                         "Format/Datatype": fmt_out}],
            "TacticValue": "0x0", "StreamId": 0, "Metadata": f"[ONNX Layer: /{name}]"}


def layer11(name: str, kind: str, dt_in: str, dt_out: str) -> dict:
    """The same in TensorRT 11.x, where the type is a separate DataType field."""
    return {"Name": name, "LayerType": kind,
            "Inputs": [{"Name": f"{name}_in", "DataType": dt_in, "Format": "kLINEAR", "Dimensions": [1, 8]}],
            "Outputs": [{"Name": f"{name}_out", "DataType": dt_out, "Format": "kLINEAR", "Dimensions": [1, 8]}]}


FP32 = "Row major linear FP32"
FP16 = "Channel major FP16 format where channel % 8 == 0"
INT8 = "Row major linear Int8 format"


def engine10(layers: list[dict]) -> str:
    return json.dumps({"Layers": layers, "Bindings": ["x", "y"]})


def engine11(layers: list[dict]) -> str:
    return json.dumps({"Layers": layers, "I/O Tensors": [{"Name": "x", "IOMode": "Input", "DataType": "Float"}]})


def test_tensor_dtype_reads_both_schemas():
    assert tensor_dtype({"Format/Datatype": FP16}) == "fp16"
    assert tensor_dtype({"Format/Datatype": FP32}) == "fp32"
    assert tensor_dtype({"Format/Datatype": INT8}) == "int8"
    assert tensor_dtype({"DataType": "Half"}) == "fp16"
    assert tensor_dtype({"DataType": "Float"}) == "fp32"
    assert tensor_dtype({"DataType": "Int8"}) == "int8"
    assert tensor_dtype({"DataType": "Int32"}) == "int32"
    assert tensor_dtype({"Format": "kLINEAR"}) is None


def test_int8_conv_with_fp32_output_counts_as_int8():
    assert layer_dtype(layer10("conv", "CaskConvolution", INT8, FP32)) == "int8"
    assert layer_dtype(layer11("shape", "Shape", "Int64", "Int64")) is None


def test_fp16_engine_passes():
    layers = [layer10(f"c{i}", "CaskConvolution", FP16, FP16) for i in range(8)]
    layers += [layer10("in_reformat", "Reformat", FP32, FP16), layer10("out", "CaskConvolution", FP16, FP32)]
    s = summarize_inspector(engine10(layers))
    assert s.compute_layers == 9 and s.layers_total == 10
    assert dict(s.by_dtype) == {"fp16": 9}
    assert assert_precision(s, "fp16", 0.5) == 1.0


def test_silently_fp32_engine_fails_with_its_own_exit_code():
    layers = [layer11(f"c{i}", "CaskConvolution", "Float", "Float") for i in range(9)]
    layers.append(layer11("c9", "CaskConvolution", "Half", "Half"))
    s = summarize_inspector(engine11(layers))
    with pytest.raises(PrecisionNotAchievedError, match="only 10% .* 9 fp32") as info:
        assert_precision(s, "fp16", 0.5)
    assert info.value.exit_code == ExitCode.PRECISION_NOT_ACHIEVED == 8


def test_int8_request_is_not_met_by_fp16():
    layers = [layer11(f"c{i}", "CaskConvolution", "Half", "Half") for i in range(6)]
    layers += [layer11(f"q{i}", "CaskConvolution", "Int8", "Half") for i in range(2)]
    s = summarize_inspector(engine11(layers))
    with pytest.raises(PrecisionNotAchievedError, match="asked for int8, but only 25%"):
        assert_precision(s, "int8", 0.5)
    assert assert_precision(s, "int8", 0.25) == pytest.approx(0.25)
    assert assert_precision(s, "fp16", 0.5) == 1.0  # int8 is narrower than fp16


def test_fp32_request_is_never_a_failure():
    s = summarize_inspector(engine10([layer10("c", "CaskConvolution", FP32, FP32)]))
    assert assert_precision(s, "fp32", 0.5) == 1.0


def test_names_only_inspector_output_is_reported_not_guessed():
    s = summarize_inspector(json.dumps({"Layers": ["conv1 + relu", "fc"], "Bindings": ["x", "y"]}))
    assert not s.detailed and s.layers_total == 2
    with pytest.raises(PrecisionNotAchievedError, match="layer names only"):
        assert_precision(s, "fp16", 0.5)


def test_myelin_graph_layers_count():
    # TensorRT folds whole subgraphs into one Myelin layer; it still counts, by its I/O types.
    s = summarize_inspector(engine11([layer11("{ForeignNode[/a...]}", "Myelin", "Half", "Half"),
                                      layer11("r", "Reformat", "Float", "Half")]))
    assert dict(s.by_dtype) == {"fp16": 1}
