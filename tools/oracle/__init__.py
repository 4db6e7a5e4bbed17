"""The oracle: `trtconv check` next to the real TensorRT-RTX parser and builder (docs/analyze.md)."""
