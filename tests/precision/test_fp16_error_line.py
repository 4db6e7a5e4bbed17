"""An FP16 refusal says its first three violations in its one line and counts the rest (RT-DETR's eleven
failing outputs made a 600-character line); the report's table still lists every output."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtconv.precision.fp16 import Fp16AccuracyError, Fp16Settings, convert_fp16
from trtconv.reference import Thresholds


def test_a_refusal_names_three_violations_and_counts_the_others():
    # y_i = (x + 2048 + i) - (2048 + i): FP16 has a spacing of 2 there, so x in [0, 1) comes back 0 or 2
    nodes, inits, outs = [], [], []
    for i in range(5):
        inits.append(numpy_helper.from_array(np.array(2048.0 + i, np.float32), f"c{i}"))
        nodes += [helper.make_node("Add", ["x", f"c{i}"], [f"up{i}"]), helper.make_node("Sub", [f"up{i}", f"c{i}"], [f"y{i}"])]
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 64]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])], outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.random((1, 64), dtype=np.float32)} for _ in range(4)]
    with pytest.raises(Fp16AccuracyError) as err:
        convert_fp16(model, Fp16Settings(thresholds=Thresholds(min_cosine=0.999)), samples=samples)
    msg = err.value.message
    assert msg.startswith("FP16 model fails the accuracy check: y0: cosine ")
    assert msg.count(": cosine ") == 3 and "; and 2 more output(s) (the table lists each)" in msg, msg
    assert len(err.value.result.report.accuracy) == 5  # the report keeps every output's numbers
