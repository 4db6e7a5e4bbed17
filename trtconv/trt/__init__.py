"""The only package that imports ``tensorrt``/``tensorrt_rtx``: one adapter over TensorRT 10.x, 11.x and TensorRT-RTX.

Everything else in trtconv must import and run without TensorRT or a GPU. Even here the
module is imported on first use, so importing these modules is free: ``flavour``
(TensorRT vs TensorRT-RTX, as data), ``loader`` (import + install hint; ``trt``, the
active flavour's module), ``compat`` (the API differences), ``builder`` (parse,
configure, build, check precision, serialize), ``engine`` (deserialize, inspect, run,
time), ``cudart`` (CUDA graphs and events via ctypes), ``environment`` (what the machine
has, for ``doctor``), ``plugins`` (trtconv's own TensorRT plugins).
"""
