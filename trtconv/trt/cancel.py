"""Ctrl-C and SIGTERM while TensorRT builds: recorded, then the build is cancelled the supported way.

TensorRT calls back into Python (its logger, the progress monitor) from inside
``build_serialized_network``. A ``KeyboardInterrupt`` raised in one of those callbacks cannot
unwind through TensorRT's C++ frames: the bindings print it and carry on, and the build would
finish and be written. So while TensorRT runs, SIGINT and SIGTERM only *record* the request
(:func:`deferred_signals`); the progress monitor then returns False from ``step_complete``
(TensorRT 10+, 11 and RTX cancel the build on that), and the caller raises
``KeyboardInterrupt`` once TensorRT has returned (:meth:`Cancel.raise_if_requested`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Cancel:
    """A cancel request shared by the signal handler, TensorRT's logger and its progress monitor."""

    def __init__(self, also: Callable[[], bool] = lambda: False) -> None:
        self._requested = False
        self._also = also  # a caller's own "stop now" (the API's ``cancelled``)

    def request(self) -> None:
        self._requested = True

    @property
    def requested(self) -> bool:
        return self._requested or self._also()

    def raise_if_requested(self) -> None:
        """After TensorRT returned: a cancel that came while it ran ends the command (exit 130)."""
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def deferred_signals(cancel: Cancel) -> Iterator[None]:
    """While the block runs, SIGINT/SIGTERM call ``cancel.request()`` instead of raising.

    Only signals that already have a Python handler are taken over (Ctrl-C's
    ``default_int_handler``, the CLI's SIGTERM handler): an ignored signal stays ignored, and a
    library user's SIGTERM keeps its default. Outside the main thread nothing changes (Python
    delivers signals only there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved: dict[signal.Signals, Any] = {}
    for sig in _SIGNALS:
        current = signal.getsignal(sig)
        if callable(current):
            saved[sig] = current
            signal.signal(sig, lambda _signum, _frame: cancel.request())
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
