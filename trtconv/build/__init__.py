"""Stage 5, build: plan the TensorRT build (profiles, limits, plugins) without importing TensorRT; write the manifest."""
