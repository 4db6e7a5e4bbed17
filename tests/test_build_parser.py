"""build_parser's verdict reading, as data (no TensorRT needed): what counts as the real parser's
refusal, and how a refusal names both reasons when a rewrite stepped aside."""

from __future__ import annotations

from trtconv.analyze import Finding, NodeReport
from trtconv.pipeline.build_parser import accepted, aside_reasons, disagreements, refusal
from trtconv.rewrites import SteppedAside
from trtconv.trt.realparse import aborted_verdict

PARSED = {"module": "tensorrt_rtx", "version": "1.7.1", "parsed": True, "parser_errors": [], "built": None,
          "build_errors": [], "logs": []}
NODE = NodeReport("dcn0", "DCNv2", "", "rewritable", (Finding("custom-op", "error", "no built-in importer"),),
                  "dcnv2-centernet")


def test_only_a_refusal_refuses_and_a_probe_out_of_time_is_none():
    assert accepted({**PARSED, "built": True}) and accepted(PARSED)  # built, or parse only (TensorRT 10/11)
    assert not accepted({**PARSED, "built": False, "build_errors": ["no kernel"]})
    assert accepted(aborted_verdict(PARSED, "timeout", "600 s"))  # the build stage decides
    assert not accepted(aborted_verdict(PARSED, "crash", "exit -6"))  # the in-process build would crash too
    assert not accepted(aborted_verdict(None, "timeout", "600 s"))  # not even parsed
    [d] = disagreements([NODE], aborted_verdict(PARSED, "timeout", "600 s"))
    assert d.real == "parsed (its build did not finish in time here) by tensorrt_rtx 1.7.1"
    assert d.predicted == "rewritable: no built-in importer"


def test_a_refusal_is_one_line_with_both_reasons():
    reasons = aside_reasons((SteppedAside("dcn0", "DCNv2", "dcnv2-centernet", "max abs error 5e-06 > 1e-12"),
                             SteppedAside("", "", "int64-to-int32", "the whole-graph proof failed with it")))
    assert list(reasons) == ["dcn0"]  # a clean-up has no node
    real = {**PARSED, "parsed": False, "parser_errors": [{"node": 0, "node_name": "dcn0", "op_type": "DCNv2",
                                                          "desc": "Plugin not found\nmore"}]}
    line = refusal("rtx", real, [NODE], reasons)
    assert "\n" not in line
    assert line == ("TensorRT-RTX's parser (tensorrt_rtx 1.7.1) rejects 1 node(s) of the prepared ONNX: dcn0 (DCNv2): "
                    "Plugin not found; its rewrite by dcnv2-centernet failed its proof (max abs error 5e-06 > 1e-12)")
    built = refusal("rtx", {**PARSED, "built": False, "build_errors": ["Error Code 4: no\nmore"]}, [NODE], {})
    assert built == ("TensorRT-RTX cannot build the prepared ONNX (tensorrt_rtx 1.7.1's builder: Error Code 4: no); "
                     "check predicted it for dcn0 (DCNv2)")
