"""Small float graphs built in code and quantized by ONNX Runtime's own quantizers (or built
with its QOperator ops directly): the originals of the tests of trtconv/rewrites/quantized/."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 1.0) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def conv_matmul_model(path: Path) -> Path:
    """Conv(+bias) -> Relu -> Flatten -> MatMul -> Add: what quantize_dynamic makes ConvInteger/MatMulInteger of."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "M"], ["mm"], name="mm"), helper.make_node("Add", ["mm", "MB"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", F, [1, 10])],
                          [_init(rng, "W", (8, 3, 3, 3)), _init(rng, "B", (8,)), _init(rng, "M", (288, 10), 0.1),
                           _init(rng, "MB", (10,))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def lstm_model(path: Path, hidden: int = 8, size: int = 6, initial_h: bool = False) -> Path:
    """A bidirectional LSTM: what quantize_dynamic makes com.microsoft::DynamicQuantizeLSTM of
    (``initial_h``: a constant non-zero initial hidden state)."""
    rng = np.random.default_rng(1)
    inputs = ["x", "W", "R", "B"] + (["", "H0"] if initial_h else [])
    node = helper.make_node("LSTM", inputs, ["y"], hidden_size=hidden, direction="bidirectional")
    inits = [_init(rng, "W", (2, 4 * hidden, size), 0.3), _init(rng, "R", (2, 4 * hidden, hidden), 0.3),
             _init(rng, "B", (2, 8 * hidden), 0.1)] + ([_init(rng, "H0", (2, 1, hidden), 0.5)] if initial_h else [])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [5, 1, size])],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def quantized_dynamic(float_model: Path, out: Path, weight_type: str = "QInt8", per_channel: bool = False) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(float_model), str(out), weight_type=getattr(QuantType, weight_type), per_channel=per_channel)
    return out


def ops_model(path: Path) -> Path:
    """Conv, Sigmoid, Mul, LeakyRelu, AveragePool, Concat, GlobalAveragePool, Gemm: what quantize_static's
    QOperator format makes QLinearConv, QLinearSigmoid, QLinearMul, ..., QGemm of."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("LeakyRelu", ["m"], ["l"], alpha=0.1),
             helper.make_node("AveragePool", ["l"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["ap", "ap"], ["cc"], axis=1),
             helper.make_node("GlobalAveragePool", ["cc"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "G", "GB"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 5])],
                          [_init(rng, "W", (8, 3, 3, 3)), _init(rng, "B", (8,)), _init(rng, "G", (5, 16), 0.3),
                           _init(rng, "GB", (5,))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def quantized_static(float_model: Path, out: Path, fmt: str, activation: str = "QInt8", weight: str = "QInt8",
                     symmetric: bool = False, per_channel: bool = False) -> Path:
    """quantize_static on four seeded random samples of the model's one input."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(float_model))
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{inp.name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)}
                            for i in range(4)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(float_model), str(out), Reader(), quant_format=getattr(QuantFormat, fmt),
                    activation_type=getattr(QuantType, activation), weight_type=getattr(QuantType, weight),
                    per_channel=per_channel, extra_options={"ActivationSymmetric": symmetric})
    return out


def fused_matmul_model(op: str) -> onnx.ModelProto:
    """com.microsoft::DynamicQuantizeMatMul or MatMulIntegerToFloat (after a DynamicQuantizeLinear), built
    directly, as ONNX Runtime's optimizer fuses them: x [2, 16] float -> [2, 6] float."""
    rng = np.random.default_rng(4)
    b = numpy_helper.from_array(rng.integers(-127, 128, (16, 6)).astype(np.int8), "B")
    bs = numpy_helper.from_array(np.full((6,), 0.01, np.float32) * np.arange(1, 7, dtype=np.float32), "b_scale")
    bz = numpy_helper.from_array(np.zeros((6,), np.int8), "b_zero")
    bias = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "bias")
    if op == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(op, ["x", "B", "b_scale", "b_zero", "bias"], ["y"], domain="com.microsoft")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                 helper.make_node(op, ["xq", "B", "xs", "b_scale", "xz", "b_zero", "bias"], ["y"],
                                  domain="com.microsoft")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 16])],
                          [helper.make_tensor_value_info("y", F, [2, 6])], [b, bs, bz, bias])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def torch_lstm_model(path: Path, size: int = 64, hidden: int = 32, layers: int = 2, gain: float = 6.0) -> Path:
    """torch's nn.LSTM(bidirectional=True, num_layers=layers) as torch.onnx.export writes it (Transpose and
    Reshape between the layers), weights scaled by ``gain`` to the magnitudes trained models reach."""
    import torch

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(size, hidden, num_layers=layers, bidirectional=True)
    with torch.no_grad():
        for p in lstm.parameters():
            p.mul_(gain)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = lstm

        def forward(self, x):
            return self.lstm(x)[0]

    torch.onnx.export(Net().eval(), (torch.randn(5, 1, size),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    return path


def moved_matmul_integer_model(path: Path) -> Path:
    """DynamicQuantizeLinear -> Transpose (uint8) -> MatMulInteger -> Cast -> Mul: a quantizer that moves
    8-bit tensors writes the Transpose on the quantized side, where TensorRT's parser refuses it."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Transpose", ["xq"], ["tq"], perm=[1, 0, 2]),
             helper.make_node("MatMulInteger", ["tq", "wq", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (16, 8)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ws")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 2, 16])],
                          [helper.make_tensor_value_info("y", F, [2, 4, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path
