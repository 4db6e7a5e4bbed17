"""trtconv: ONNX to TensorRT in one command, and the truth about the result.

Nothing imported here touches TensorRT; only ``trtconv.trt`` does.
"""

__version__ = "0.1.0"
