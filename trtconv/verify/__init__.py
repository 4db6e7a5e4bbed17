"""Stage 6, verify: compare an engine (or a rewritten ONNX) with ONNX Runtime on the same inputs."""
