"""The only package that imports ``tensorrt``: the adapter over TensorRT 10.x and 11.x.

Everything else in trtconv must import and run without TensorRT or a GPU. Even here
``import tensorrt`` happens inside functions, so importing these modules is free:
``loader`` (import + install hint), ``compat`` (the 10.x/11.x differences), ``builder``
(parse, configure, build, check precision, serialize), ``engine`` (deserialize, inspect,
run, time), ``cudart`` (CUDA graphs and events via ctypes), ``environment`` (what the
machine has, for ``doctor``), ``plugins`` (trtconv's own TensorRT plugins).
"""
