"""What an engine is: its layers and their precisions, its I/O and profiles, where it came from.

``layers`` turns a layer table (engine inspector JSON, or the strongly typed network's table the
manifest recorded) into rows and says which layers missed the asked precision and why;
``engine`` assembles ``trtconv inspect``'s view from the engine, its manifest and TensorRT.
"""
