"""The only package that imports ``tensorrt``: the adapter over TensorRT 10.x and 11.x.

Everything else in trtconv must import and run without TensorRT or a GPU.
"""
