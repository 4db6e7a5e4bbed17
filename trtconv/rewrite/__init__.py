"""Stage 3, rewrite: turn what TensorRT cannot parse into what it can, each rewrite proven numerically."""
