"""Layer reference: ONNX Runtime as the CPU reference every stage compares against, and output comparison."""
