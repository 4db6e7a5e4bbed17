"""Small models written for one rule each: name -> (model, build profile, note)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, dtype=F, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def RULE_MODELS() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    out: dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]] = {}
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    out["shared_dim_nonsquare"] = (_model(relu, [_vi("x", F, [1, 3, "s", "s"])], [_vi("y", F, [1, 3, "s", "s"])]),
                                   {"x": (1, 3, 8, 16)}, "H and W share a dim_param; the profile is not square")
    out["shared_dim_square"] = (_model(relu, [_vi("x", F, [1, 3, "s", "s"])], [_vi("y", F, [1, 3, "s", "s"])]),
                                {"x": (1, 3, 8, 8)}, "H and W share a dim_param; the profile is square")
    out.update(MORE_MODELS())
    return out


def _if_model(rank_mismatch: bool, cond_from: str) -> onnx.ModelProto:
    """An If whose branches return x (rank 2) and x squeezed or not; cond from an input value or a shape."""
    then_out = _vi("t_out", F, None)
    else_out = _vi("e_out", F, None)
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    then_g = helper.make_graph([helper.make_node("Squeeze" if rank_mismatch else "Identity",
                                                 ["x", "axes0"] if rank_mismatch else ["x"], ["t_out"])],
                               "then", [], [then_out], [axes] if rank_mismatch else [])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [], [else_out])
    nodes = []
    if cond_from == "value":
        nodes.append(helper.make_node("Greater", ["flag", "zero"], ["cond"]))
    else:
        nodes += [helper.make_node("Shape", ["x"], ["shp"], start=0, end=1),
                  helper.make_node("Equal", ["shp", "one"], ["cond1"]),
                  helper.make_node("Squeeze", ["cond1", "axes0"], ["cond"])]
    nodes.append(helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g))
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"), axes]
    ins = [_vi("x", F, ["n", 4])] + ([_vi("flag", F, [])] if cond_from == "value" else [])
    return _model(nodes, ins, [_vi("y", F, None)], inits, opset=17)


def _lstm_in_if(y_out: str) -> onnx.ModelProto:
    """LSTM in both branches of an If; the branch returns Y (y_out set) or Y_h."""
    w = numpy_helper.from_array(np.zeros((1, 16, 2), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((1, 16, 4), np.float32), "R")
    then_g = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], [y_out and "t_out", "t_h"],
                                                 hidden_size=4),
                                helper.make_node("Identity", ["t_out" if y_out else "t_h"], ["t_res"])], "then", [],
                               [_vi("t_res", F, None)])
    else_g = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], [y_out and "e_out", "e_h"],
                                                 hidden_size=4),
                                helper.make_node("Identity", ["e_out" if y_out else "e_h"], ["e_res"])], "else", [],
                               [_vi("e_res", F, None)])
    nodes = [helper.make_node("Greater", ["flag", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"), w, r]
    return _model(nodes, [_vi("x", F, [3, 1, 2]), _vi("flag", F, [])], [_vi("y", F, None)], inits)


def _lstm_plain() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros((1, 16, 2), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((1, 16, 4), np.float32), "R")
    return _model([helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4)], [_vi("x", F, [3, 1, 2])],
                  [_vi("y", F, None)], [w, r])


def MORE_MODELS() -> dict[str, tuple[onnx.ModelProto, dict[str, tuple[int, ...]], str]]:
    return {
        "if_rank_value_cond": (_if_model(True, "value"), {"x": (1, 4)}, "If branches of different rank, cond from a value"),
        "if_rank_shape_cond": (_if_model(True, "shape"), {"x": (1, 4)}, "If branches of different rank, cond from a shape"),
        "if_same_rank": (_if_model(False, "value"), {"x": (1, 4)}, "If branches of equal rank"),
        "lstm_in_if_state": (_lstm_in_if(""), {}, "LSTM inside If branches, Y_h used (Silero VAD's structure)"),
        "lstm_in_if_y": (_lstm_in_if("y"), {}, "LSTM inside If branches, only Y used"),
        "lstm_plain": (_lstm_plain(), {}, "the same LSTM at top level"),
        "clip_int32": (_int_clip(TensorProto.INT32), {}, "Clip on INT32 with INT32 bounds (issue 33)"),
        "clip_int64": (_int_clip(TensorProto.INT64), {}, "Clip on INT64 with INT64 bounds (issue 33)"),
    }


def _int_clip(dtype: int) -> onnx.ModelProto:
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    bounds = [numpy_helper.from_array(np.array(v, np_type), n) for n, v in (("lo", -3), ("hi", 5))]
    return _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [_vi("x", dtype, [2, 4])],
                  [_vi("y", dtype, [2, 4])], bounds)
