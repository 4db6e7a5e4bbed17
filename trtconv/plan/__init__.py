"""Layer plan: what TensorRT will be asked (profiles, limits, plugins, corners) and the manifest; no TensorRT here."""
