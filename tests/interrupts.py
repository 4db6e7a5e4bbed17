"""Signals delivered at a known point of a real trtconv process, so interrupt tests do not race.

The process runs ``trtconv.cli.main.main`` with one change: when it is about to rename a
finished temp file into the watched folder (``os.replace``, the moment an output would
appear), it sends ``sig`` to its own main thread and waits for the handler, in short sleeps
so that the interpreter checks for it. The signal travels the real path
(SIGINT -> KeyboardInterrupt, SIGTERM -> trtconv's handler), with the temp file written in
full and the output not yet there: the latest moment an interrupt can still leave nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

_RUNNER = """
import os, signal, sys, threading, time
from pathlib import Path
folder, sig = Path(sys.argv[1]).resolve(), int(sys.argv[2])
real_replace = os.replace
def replace(src, dst, *args, **kwargs):
    if Path(dst).resolve().parent == folder:
        print("signal before rename of", os.path.relpath(src, folder), file=sys.stderr, flush=True)
        signal.pthread_kill(threading.main_thread().ident, sig)
        for _ in range(1200):  # the handler raises in here; short sleeps, so the interpreter
            time.sleep(0.1)    # checks for it even if the kernel woke no sleeping thread
        raise SystemExit("the signal was not delivered")
    return real_replace(src, dst, *args, **kwargs)
os.replace = replace
from trtconv.cli.main import main
sys.argv = ["trtconv", *sys.argv[3:]]
main()
"""


def interrupt_before_rename(args: list[str], folder: Path, sig: int, timeout: float = 1200
                            ) -> subprocess.CompletedProcess[str]:
    """Run ``trtconv *args``; deliver ``sig`` just before an output is renamed into ``folder``.
    The outcome does not depend on timing; ``timeout`` is only generous (a loaded CI runner
    was seen to take five minutes over the 32 MB quantize)."""
    return subprocess.run([sys.executable, "-c", _RUNNER, str(folder), str(int(sig)), *args],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_as_from_a_terminal)


_AFTER = """
import os, signal, sys, threading, time
from pathlib import Path
folder, sig, name = Path(sys.argv[1]).resolve(), int(sys.argv[2]), sys.argv[3]
real_replace = os.replace
def replace(src, dst, *args, **kwargs):
    done = real_replace(src, dst, *args, **kwargs)
    if Path(dst).resolve() == folder / name:
        print("signal after rename to", name, file=sys.stderr, flush=True)
        signal.pthread_kill(threading.main_thread().ident, sig)
        for _ in range(1200):  # the handler raises in here, the file already in place
            time.sleep(0.1)
        raise SystemExit("the signal was not delivered")
    return done
os.replace = replace
from trtconv.cli.main import main
sys.argv = ["trtconv", *sys.argv[4:]]
main()
"""


def interrupt_after_rename(args: list[str], folder: Path, name: str, sig: int, timeout: float = 1200
                           ) -> subprocess.CompletedProcess[str]:
    """Run ``trtconv *args``; deliver ``sig`` just after ``folder/name`` was renamed into place: the
    output is whole on disk and the code that would record it has not run (the window a Ctrl-C hit
    during `build`'s save stage once, leaving the prepared ONNX behind)."""
    return subprocess.run([sys.executable, "-c", _AFTER, str(folder), str(int(sig)), name, *args],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_as_from_a_terminal)


def _as_from_a_terminal() -> None:
    """SIGINT and SIGTERM at their defaults, as in a command typed at a shell. A test run
    started in the background (``make test &``, a non-interactive shell's ``&``) ignores
    SIGINT, the child inherits that, and Python then installs no KeyboardInterrupt handler:
    the Ctrl-C tests would fail for a reason that has nothing to do with trtconv."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


_DURING_TENSORRT = """
import os, signal, sys, threading
sig, callback = int(sys.argv[1]), sys.argv[2]
import tensorrt_rtx
real_build = tensorrt_rtx.Builder.build_serialized_network
main_thread = threading.main_thread().ident
def profiler(frame, event, arg):
    # the first time TensorRT calls back into trtconv's Python (`log`: its logger; `step_complete`:
    # its progress monitor) from inside the real builder, the signal goes to this thread
    if event == "call" and frame.f_code.co_name == callback and "trtconv" in frame.f_code.co_filename:
        sys.setprofile(None)
        print("signal inside TensorRT's", callback, "callback", file=sys.stderr, flush=True)
        signal.pthread_kill(main_thread, sig)
def build_serialized_network(self, network, config):
    sys.setprofile(profiler)
    try:
        return real_build(self, network, config)
    finally:
        sys.setprofile(None)
tensorrt_rtx.Builder.build_serialized_network = build_serialized_network
from trtconv.cli.main import main
sys.argv = ["trtconv", *sys.argv[3:]]
main()
"""


def interrupt_inside_tensorrt_build(args: list[str], sig: int, callback: str = "log", timeout: float = 1200
                                    ) -> subprocess.CompletedProcess[str]:
    """Run ``trtconv *args`` (a ``build --trt rtx``); send ``sig`` from inside the real TensorRT-RTX
    builder, at the first call into trtconv's ``callback`` (``log``: TensorRT's logger;
    ``step_complete``: its progress monitor). Where a Ctrl-C at a terminal usually lands: TensorRT
    runs for minutes and calls back into Python all the while. Deterministic: the signal is sent
    on the builder's own call, not after a delay."""
    return subprocess.run([sys.executable, "-c", _DURING_TENSORRT, str(int(sig)), callback, *args],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_as_from_a_terminal)


_WHILE_LOADING = """
import importlib, signal, sys, threading, time
module = sys.argv[1]
real_import = importlib.import_module
def import_module(name, *args, **kwargs):
    if name == module:  # the command's module, loaded by the CLI before its options are parsed
        print("signal while loading", name, file=sys.stderr, flush=True)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        for _ in range(1200):
            time.sleep(0.1)
        raise SystemExit("the signal was not delivered")
    return real_import(name, *args, **kwargs)
importlib.import_module = import_module
from trtconv.cli.main import main
sys.argv = ["trtconv", *sys.argv[2:]]
main()
"""


def interrupt_while_loading_command(module: str, args: list[str], timeout: float = 300
                                    ) -> subprocess.CompletedProcess[str]:
    """Run ``trtconv *args``; send SIGINT while the CLI imports ``module`` (the command's own module,
    e.g. ``trtconv.cli.quantize_command``): a Ctrl-C in the first second, before the command runs."""
    return subprocess.run([sys.executable, "-c", _WHILE_LOADING, module, *args],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_as_from_a_terminal)
