"""CUDA-graph replay and event timing as bench uses them, on a real GPU (no TensorRT needed: any
stream work captures)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from trtconv.trt.cudart import EventTimer, capture, compute_capability

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda():
    return pytest.importorskip("polygraphy.cuda")


def test_captured_work_replays(cuda):
    rt = cuda.wrapper().handle
    stream = cuda.Stream()
    buf = cuda.DeviceArray(shape=(1024,), dtype=np.uint8)
    value = {"v": 7}

    def enqueue() -> bool:
        return rt.cudaMemsetAsync(ctypes.c_void_p(buf.ptr), value["v"], ctypes.c_size_t(1024),
                                  ctypes.c_void_p(stream.ptr)) == 0

    assert enqueue()  # plain enqueue works
    graph, why_not = capture(rt, int(stream.ptr), enqueue)
    assert graph is not None, why_not
    host = np.zeros(1024, np.uint8)
    buf.copy_from(host, stream=stream)  # clear, then replay the captured memset
    graph.launch()
    buf.copy_to(host, stream=stream)
    stream.synchronize()
    assert (host == 7).all()
    graph.close()


def test_refused_capture_leaves_the_stream_usable(cuda):
    rt = cuda.wrapper().handle
    stream = cuda.Stream()
    graph, why_not = capture(rt, int(stream.ptr), lambda: False)
    assert graph is None and "cannot be captured" in why_not
    buf = cuda.DeviceArray(shape=(16,), dtype=np.float32)
    buf.copy_from(np.arange(16, dtype=np.float32), stream=stream)
    out = np.zeros(16, np.float32)
    buf.copy_to(out, stream=stream)
    stream.synchronize()
    assert (out == np.arange(16)).all()


def test_event_timer_measures_gpu_work(cuda):
    rt = cuda.wrapper().handle
    stream = cuda.Stream()
    small = cuda.DeviceArray(shape=(1 << 10,), dtype=np.uint8)
    big = cuda.DeviceArray(shape=(1 << 30,), dtype=np.uint8)  # 1 GiB memset: clearly longer

    def memset(buf):
        return lambda: rt.cudaMemsetAsync(ctypes.c_void_p(buf.ptr), 1, ctypes.c_size_t(buf.nbytes),
                                          ctypes.c_void_p(stream.ptr))

    timer = EventTimer(rt, int(stream.ptr))
    t_small = min(timer.time(memset(small)) for _ in range(5))
    t_big = min(timer.time(memset(big)) for _ in range(5))
    timer.close()
    assert 0.0 <= t_small < t_big
    big.free()


def test_compute_capability_matches_torch(cuda):
    """What the DCNv2 plugin asks before offering its compute_90a tactics."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rt = cuda.wrapper().handle
    assert compute_capability(rt) == tuple(torch.cuda.get_device_capability(0))
    assert compute_capability(rt, device=0) == tuple(torch.cuda.get_device_capability(0))
    assert compute_capability(rt, device=999) is None  # no such device: the runtime says no
