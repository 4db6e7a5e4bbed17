"""What an engine is: its layers and their precisions, its I/O and profiles, where it came from.

``layers`` turns a layer table (engine inspector JSON, or the strongly typed network's table the
manifest recorded) into rows and says which layers missed the asked precision and why;
``engine`` assembles ``trtconv inspect``'s view from the engine, its manifest and TensorRT.
"""

from trtconv.inspection.engine_view import inspect_engine
from trtconv.inspection.layers import intended_precisions, layer_rows, off_precision

__all__ = ["inspect_engine", "intended_precisions", "layer_rows", "off_precision"]
