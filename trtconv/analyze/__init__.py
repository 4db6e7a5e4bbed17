"""Stage 2, analyze: what the target TensorRT parser will reject, per node, before any GPU is touched."""
