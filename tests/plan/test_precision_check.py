"""The achieved-precision check, on inspector JSON built from the documented 10.x and 11.x schemas."""

from __future__ import annotations

import json

import pytest

from trtconv.errors import ExitCode, PrecisionNotAchievedError
from trtconv.plan.precision_check import assert_precision, layer_dtype, summarize_inspector, tensor_dtype


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


def test_fused_subgraphs_are_counted_apart():
    # A Myelin layer shows only its boundary tensors: FP32 at the edges of an FP16 graph whose
    # ONNX keeps FP32 inputs/outputs. It must not count as an FP32 layer...
    fused = layer11("{ForeignNode[/backbone/conv1.../head/Sigmoid]}", "Myelin", "Float", "Float")
    s = summarize_inspector(engine11([fused] + [layer11(f"c{i}", "CaskConvolution", "Half", "Half")
                                                for i in range(3)]))
    assert s.opaque_layers == 1 and dict(s.by_dtype) == {"fp16": 3}
    assert assert_precision(s, "fp16", 0.5) == 1.0
    # ...and when everything is fused the engine cannot show its precision: said, not guessed.
    # ...and when everything is fused the engine cannot show its precision: the ONNX's explicit
    # types decide (a strongly typed build follows them), and the answer is "unknown", not a share.
    only = summarize_inspector(engine11([fused]))
    assert only.compute_layers == 1 and only.by_dtype == ()
    assert assert_precision(only, "fp16", 0.5, onnx_reduced=True) is None
    with pytest.raises(PrecisionNotAchievedError, match="hide their precision"):
        assert_precision(only, "fp16", 0.5, onnx_reduced=False)
    assert json.loads(json.dumps(only.to_json()))["opaque_layers"] == 1


def test_transparent_fp32_layers_still_fail_next_to_fused_ones():
    fused = layer11("{ForeignNode[/a...]}", "Myelin", "Half", "Half")
    layers = [fused] + [layer11(f"c{i}", "CaskConvolution", "Float", "Float") for i in range(4)]
    with pytest.raises(PrecisionNotAchievedError, match="0%"):
        assert_precision(summarize_inspector(engine11(layers)), "fp16", 0.5)


def test_onnx_evidence_of_reduced_precision(ocr_cls, tmp_path):
    import onnx
    from click.testing import CliRunner

    from trtconv.cli.main import cli
    from trtconv.plan.precision_check import onnx_has_reduced_precision

    fp32 = onnx.load(str(ocr_cls), load_external_data=False)
    assert not onnx_has_reduced_precision(fp32, "fp16") and not onnx_has_reduced_precision(fp32, "int8")
    res = CliRunner().invoke(cli, ["build", str(ocr_cls), "-o", str(tmp_path / "h.engine"), "--shapes",
                                   "x:1x3x48x192", "--precision", "fp16", "--prepare-only"])
    assert res.exit_code == 0, res.output
    fp16 = onnx.load(str(tmp_path / "h.prepared.onnx"), load_external_data=False)
    assert onnx_has_reduced_precision(fp16, "fp16") and not onnx_has_reduced_precision(fp16, "int8")


def test_parser_errors_name_each_node():
    from trtconv.trt.builder import ParserIssue, parser_error

    issues = [ParserIssue(12, "/head/dcn0", "DCNv2", "UNSUPPORTED_NODE",
                          "Plugin not found, are the plugin name, version, and namespace correct?"),
              ParserIssue(40, "", "TopK", "UNSUPPORTED_NODE_ATTR", "K input must be less than 3840")]
    err = parser_error("m.prepared.onnx", issues)
    assert err.exit_code == ExitCode.BUILD_FAILED
    assert err.message == ("TensorRT's ONNX parser rejected m.prepared.onnx: node /head/dcn0 (DCNv2): Plugin not "
                           "found, are the plugin name, version, and namespace correct? [UNSUPPORTED_NODE]; "
                           "node #40 (TopK): K input must be less than 3840 [UNSUPPORTED_NODE_ATTR]")
    many = parser_error("m.onnx", issues * 6, shown=10)
    assert many.message.endswith("(and 2 more)")


def test_the_share_reached_is_the_retry_and_none_is_the_wider_precision():
    """The CLI turns ``retry`` into the command with that flag (tests/cli/test_hints_run.py); the share offered is
    the one reached, rounded down, and an engine with no layer in the precision is offered the next wider one."""
    layers = [layer11(f"c{i}", "CaskConvolution", "Float", "Float") for i in range(2)]
    layers.append(layer11("h", "CaskConvolution", "Half", "Half"))
    with pytest.raises(PrecisionNotAchievedError) as info:
        assert_precision(summarize_inspector(engine11(layers)), "fp16", 0.5)
    assert info.value.retry == ("--min-precision-share", "0.33")
    none = [layer11(f"c{i}", "CaskConvolution", "Float", "Float") for i in range(3)]
    with pytest.raises(PrecisionNotAchievedError) as info:
        assert_precision(summarize_inspector(engine11(none)), "fp16", 0.5)
    assert info.value.retry == ("--precision", "fp32")
    assert "the precision stage's report says which layers it kept and why" in (info.value.hint or "")
    with pytest.raises(PrecisionNotAchievedError) as info:
        assert_precision(summarize_inspector(engine11(none)), "int8", 0.5)
    assert info.value.retry == ("--precision", "fp16")
