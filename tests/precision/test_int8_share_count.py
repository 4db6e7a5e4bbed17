"""One definition of "a layer in INT8" (issue 32): a compute layer whose data and weight both come through Q/DQ.

The INT8 share (``_share``), auto-exclude's budget (``ShareLimit``), the refusal before calibrating and the
benchmarks' count of a written model counted it three ways (any Q/DQ, both inputs, both through
DequantizeLinear); a layer with its weight alone quantized runs in float in TensorRT.
"""

from __future__ import annotations

import numpy as np
import onnx
from builders import two_conv_net
from onnx import numpy_helper

from trtconv.precision.int8 import Int8Settings, quantize_int8
from trtconv.precision.int8.compose import _share
from trtconv.precision.int8.gate import ShareLimit, in_int8, int8_layers, int8_layers_written
from trtconv.precision.int8.qdq import Placement
from trtconv.precision.int8.sensitivity import LayerError
from trtconv.samples.sources import ArraySamples


def _placed(node: str, *indices: int) -> list[Placement]:
    return [Placement("main", node, "Conv", k, f"{node}_{k}", "weight" if k else "activation", "") for k in indices]


def test_a_layer_is_in_int8_when_both_operands_are_quantized():
    assert in_int8({0, 1}) and in_int8([1, 0, 2]) and not in_int8({1}) and not in_int8({0}) and not in_int8(())
    placed = [*_placed("both", 0, 1), *_placed("weight_only", 1), *_placed("data_only", 0)]
    assert int8_layers(placed) == {("main", "both")}
    share = ShareLimit(0.5, 4, int8_layers(placed))
    assert _share(placed, share) == 0.25 and share.int8_layers == 1 and share.budget == -1
    # keeping a layer that is not in INT8 out of it costs the share nothing
    wide = ShareLimit(0.25, 4, int8_layers(placed))
    ranking = [LayerError("main", "weight_only", "Conv", 0.5, 0.9), LayerError("main", "both", "Conv", 0.1, 0.99)]
    assert wide.budget == 0 and wide.prefix_limit(ranking) == 1


def test_the_report_and_the_written_model_count_alike():
    rng = np.random.default_rng(0)
    samples = ArraySamples(tuple({"x": rng.standard_normal((1, 4, 12, 12)).astype(np.float32)} for _ in range(8)))
    model = two_conv_net()
    res = quantize_int8(model, Int8Settings(unverified=True, method="minmax", auto_exclude=False), samples,
                        eval_samples=samples)
    written = int8_layers_written(res.model)
    assert written == 2 and res.report.int8_share == written / 2
    # a peer's model whose second Conv reads float weights (its DequantizeLinear folded away): one layer in INT8
    folded = onnx.ModelProto()
    folded.CopyFrom(res.model)
    conv2 = next(n for n in folded.graph.node if n.name == "conv2")
    w = numpy_helper.from_array(numpy_helper.to_array(model.graph.initializer[2]), "w2_float")
    folded.graph.initializer.append(w)
    conv2.input[1] = "w2_float"
    assert int8_layers_written(folded) == 1
