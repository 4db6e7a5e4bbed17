"""Layer verify: compare a built engine with the ONNX Runtime reference on the same inputs."""
