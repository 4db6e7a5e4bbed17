"""CUDA runtime pieces bench needs beyond buffers: graph capture/replay and event timing.

Through the CUDA runtime's C API via ctypes (the libcudart handle ``polygraphy.cuda``
already loaded), so it needs no compiled code. No TensorRT here: the work is any callable
that enqueues on the stream (for bench: ``execute_async_v3``), which also lets this run
in GPU tests without TensorRT.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

CAPTURE_MODE_THREAD_LOCAL = 1  # cudaStreamCaptureModeThreadLocal


class GraphLaunch:
    """An instantiated graph bound to a stream; ``launch()`` replays the captured work."""

    def __init__(self, cudart: Any, stream: ctypes.c_void_p, graph: ctypes.c_void_p, exec_: ctypes.c_void_p) -> None:
        self._rt, self._stream, self._graph, self._exec = cudart, stream, graph, exec_

    def launch(self) -> None:
        status = self._rt.cudaGraphLaunch(self._exec, self._stream)
        if status != 0:
            raise RuntimeError(f"cudaGraphLaunch failed with CUDA error {status}")

    def close(self) -> None:
        if self._exec:
            self._rt.cudaGraphExecDestroy(self._exec)
            self._rt.cudaGraphDestroy(self._graph)
            self._exec = ctypes.c_void_p()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


def capture(cudart: Any, stream_ptr: int, enqueue: Callable[[], bool]) -> tuple[GraphLaunch | None, str | None]:
    """(graph, None) or (None, why not). Errors from a refused capture are cleared, so the
    stream stays usable for plain enqueues."""
    stream = ctypes.c_void_p(stream_ptr)
    graph, exec_ = ctypes.c_void_p(), ctypes.c_void_p()
    status = cudart.cudaStreamBeginCapture(stream, CAPTURE_MODE_THREAD_LOCAL)
    if status != 0:
        cudart.cudaGetLastError()
        return None, f"cudaStreamBeginCapture failed with CUDA error {status}"
    try:
        ok = bool(enqueue())
    finally:
        end = cudart.cudaStreamEndCapture(stream, ctypes.byref(graph))
    if not ok or end != 0:
        cudart.cudaGetLastError()
        if graph:
            cudart.cudaGraphDestroy(graph)
        return None, "the work cannot be captured in a CUDA graph (plugins or data-dependent shapes?)"
    status = cudart.cudaGraphInstantiate(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0))
    if status != 0:
        cudart.cudaGetLastError()
        cudart.cudaGraphDestroy(graph)
        return None, f"cudaGraphInstantiate failed with CUDA error {status}"
    return GraphLaunch(cudart, stream, graph, exec_), None


class EventTimer:
    """GPU time of work on one stream, between two CUDA events (what trtexec calls GPU compute)."""

    def __init__(self, cudart: Any, stream_ptr: int) -> None:
        self._rt = cudart
        self._stream = ctypes.c_void_p(stream_ptr)
        self._start, self._end = ctypes.c_void_p(), ctypes.c_void_p()
        for ev in (self._start, self._end):
            status = cudart.cudaEventCreate(ctypes.byref(ev))
            if status != 0:
                raise RuntimeError(f"cudaEventCreate failed with CUDA error {status}")

    def time(self, launch: Callable[[], Any]) -> float:
        """Milliseconds of GPU time ``launch`` enqueues (waits for it to finish)."""
        self._rt.cudaEventRecord(self._start, self._stream)
        launch()
        self._rt.cudaEventRecord(self._end, self._stream)
        status = self._rt.cudaEventSynchronize(self._end)
        if status != 0:
            raise RuntimeError(f"cudaEventSynchronize failed with CUDA error {status}")
        ms = ctypes.c_float(0.0)
        self._rt.cudaEventElapsedTime(ctypes.byref(ms), self._start, self._end)
        return float(ms.value)

    def close(self) -> None:
        for ev in (self._start, self._end):
            if ev:
                self._rt.cudaEventDestroy(ev)
        self._start, self._end = ctypes.c_void_p(), ctypes.c_void_p()


def compute_capability(cudart: Any, device: int | None = None) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device (the current one by default); None if the runtime says no.

    The DCNv2 plugin asks at build time whether its compute_90a kernels can run here.
    """
    dev = ctypes.c_int(0)
    if device is None:
        if cudart.cudaGetDevice(ctypes.byref(dev)) != 0:
            return None
    else:
        dev.value = device
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    # cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76
    if cudart.cudaDeviceGetAttribute(ctypes.byref(major), 75, dev) != 0:
        return None
    if cudart.cudaDeviceGetAttribute(ctypes.byref(minor), 76, dev) != 0:
        return None
    return int(major.value), int(minor.value)
