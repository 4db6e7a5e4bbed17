"""The `trtconv` command: the CLI in a child process, and a parent that stands by it.

Native code can end the process instead of raising: TensorRT's builder on some graphs (a build of
openwakeword's Silero VAD once ended in exit -11), protobuf when an allocation fails under an
address-space limit (docs/reliability.md). A crashed process can say nothing: the shell printed
"Segmentation fault" and exit 139, and the prepared ONNX the build had written stayed behind.
The parent here turns that into what every other failure is: one line saying what happened, a
documented exit code, and nothing left behind (the child records, as each stage starts, which files
a failure then would remove: ``trtconv.outputs.note_for_crash``). It imports little (one more Python start:
about 0.13 s a command, docs/benchmarks.md); ``python -m trtconv`` runs the CLI without it.

Signals: Ctrl-C at a terminal reaches both processes (one process group); the parent ignores it and
the child handles it as it always has. SIGTERM and SIGHUP sent to the parent alone (``docker stop``,
a supervisor) are passed on to the child.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile

from trtconv.errors import CRASH_NOTE_ENV, ExitCode
from trtconv.outputs import read_crash_note, remove_crashed_outputs

CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
NATIVE_STAGES = {"build": "TensorRT's builder"}  # stages where a crash is the backend's, not trtconv's


def main() -> None:
    fd, note = tempfile.mkstemp(prefix="trtconv-crash-note-")
    os.close(fd)
    env = {**os.environ, CRASH_NOTE_ENV: note}
    try:
        child = subprocess.Popen([sys.executable, "-m", "trtconv", *sys.argv[1:]], env=env)
    except OSError as exc:
        os.unlink(note)
        sys.stderr.write(f"trtconv: error: cannot start {sys.executable}: {exc}\n")
        sys.exit(ExitCode.INTERNAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    try:
        if code >= 0:
            sys.exit(code)
        sys.exit(crashed(-code, note))
    finally:
        for path in (note, note + ".tmp"):
            try:
                os.unlink(path)
            except OSError:
                pass


def crashed(signum: int, note: str) -> int:
    """Say what ended the child, remove what its run wrote; the exit code."""
    record = read_crash_note(note)
    stage = str(record.get("stage") or "")
    removed = remove_crashed_outputs(record)
    name = signal.Signals(signum).name
    where = f" in the {stage} stage" + (f" ({NATIVE_STAGES[stage]})" if stage in NATIVE_STAGES else "") if stage else ""
    left = f"; removed what it had written ({', '.join(removed)})" if removed else "; nothing it wrote is left"
    if signum == signal.SIGKILL:
        sys.stderr.write(f"trtconv: error: killed by {name}{where} (the kernel's out-of-memory killer, or kill -9)"
                         f"{left}\n  hint: give the machine more memory, or build a smaller profile "
                         f"(--shapes/--max-shapes)\n")
        return ExitCode.OUT_OF_MEMORY
    if signum in CRASHES:
        native = stage in NATIVE_STAGES
        again = shlex.join(["trtconv", "-v", *sys.argv[1:]])
        sys.stderr.write(f"trtconv: error: crashed ({name}){where}{left}\n  hint: {again}  # "
                         + ("its log up to the crash; the crash is TensorRT's: a static profile (--shapes) "
                            "avoids some" if native else "the log up to the crash, for a bug report")
                         + "\n")
        return ExitCode.BUILD_FAILED if native else ExitCode.INTERNAL
    sys.stderr.write(f"trtconv: error: ended by {name}{where}{left}\n")
    return 128 + signum


if __name__ == "__main__":
    main()
