"""Why a layer missed the requested precision, as `inspect` says it, from the manifest's precision report."""

from __future__ import annotations

from trtconv.inspection.layers import intended_precisions


def test_a_quantized_node_the_remainder_keeps_in_fp32_says_both():
    # torchcrepe's "full" pitch model, INT8 with an FP16 remainder: conv2's output reaches 1.6e4 on speech frames,
    # so the remainder keeps it FP32 although its inputs were quantized; `inspect` said only "Q/DQ placed"
    report = {"requested": "int8", "report": {
        "remainder": "fp16",
        "placed": [{"node": "/conv1/Conv"}, {"node": "/conv2/Conv"}],
        "skipped": [{"node": "/Softmax", "reason": "softmax is numerically sensitive"}],
        "fp16_remainder": {"kept": [{"name": "/conv2/Conv", "rule": "activation-range",
                                     "detail": "tensor '/conv2/Conv_output_0' reaches 1.645e+04 on sample data"}]}}}
    got = intended_precisions(report)
    assert got["/conv1/Conv"] == ("int8", "Q/DQ placed")
    precision, why = got["/conv2/Conv"]
    assert precision == "fp32" and why.startswith("Q/DQ placed on its inputs, but the INT8 remainder keeps the node in "
                                                  "FP32 (FP16 rule activation-range: tensor '/conv2/Conv_output_0'")
    assert got["/Softmax"][0] == "fp16"
