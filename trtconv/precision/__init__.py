"""Stage 4, precision: FP16 and INT8 made explicit in the ONNX (TensorRT 11 has no builder flags for them)."""
