"""The one exception hierarchy and the one table of exit codes.

Every command ends through :class:`ExitCode`: stages raise a :class:`TrtconvError`
subclass, and only ``trtconv.cli.main`` turns it into a process exit status, so a
Makefile or CI step can rely on the numbers documented in ``docs/exit-codes.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any, ClassVar, TypeVar


class ExitCode(IntEnum):
    """Process exit statuses. Stable: CI scripts branch on these numbers."""

    OK = 0
    INTERNAL = 1  # a bug in trtconv: traceback printed, please report
    USAGE = 2  # bad flags, bad config file, output exists without --force
    INVALID_MODEL = 3  # not ONNX, corrupt, truncated, missing/escaping external data
    NEEDS_REWRITE = 4  # check: every rejected node can be rewritten or mapped to a plugin
    UNSUPPORTED = 5  # check/build: some node cannot be handled by parser, rewrite or plugin
    BUILD_FAILED = 6  # TensorRT builder or parser failed
    ACCURACY = 7  # verify/quantize/rewrite numbers outside the thresholds
    PRECISION_NOT_ACHIEVED = 8  # asked for fp16/int8, engine mostly runs in fp32
    TENSORRT_UNAVAILABLE = 9  # TensorRT, a GPU or a plugin library is missing
    IO_ERROR = 10  # output folder read-only/full, file unreadable
    BAD_DATA = 11  # calibration or input data wrong: shape, dtype, NaN, corrupt file
    OUT_OF_MEMORY = 12  # an allocation failed (memory or address-space limit): nothing written
    INTERRUPTED = 130  # Ctrl-C


# The file a process that runs the CLI for the `trtconv` command (trtconv/launcher.py) records its stage and
# outputs in, so that its crash can still be said and cleaned up (trtconv/outputs.py, note_for_crash).
CRASH_NOTE_ENV = "TRTCONV_CRASH_NOTE"


class TrtconvError(Exception):
    """A failure the user can act on: printed as one line plus a hint, no traceback."""

    exit_code: ClassVar[ExitCode] = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None, *, retry: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        # (flag, value) with which the same command would get past this failure (where that is a choice the user
        # may make; value "" for a switch): trtconv.cli.main makes the hint that command, as typed, with the flag set
        self.retry = retry

    def __str__(self) -> str:
        return self.message


E = TypeVar("E", bound="WithResult")


class WithResult(TrtconvError):
    """A failure that carries what the run got as far as (``result``: the model and its report, for the report that
    explains the refusal). Mixed in beside the class that sets the exit code."""

    def __init__(self, message: str, result: Any, hint: str | None = None, *,
                 retry: tuple[str, str] | None = None) -> None:
        super().__init__(message, hint, retry=retry)
        self.result = result

    @classmethod
    def of(cls: type[E], exc: TrtconvError, result: Any) -> E:
        """``exc`` as this class, with the outer run's ``result``: its message, hint and retry carried over (a stage's
        refusal re-raised by the command that ran it keeps the command its hint offers)."""
        return cls(exc.message, result, exc.hint, retry=exc.retry)


class UsageError(TrtconvError):
    exit_code = ExitCode.USAGE


class ShapesNeeded(UsageError):
    """Inputs with dynamic dims that nothing gave a shape: ``dims`` holds each one's dims. In a command that knows its
    command line (trtconv.cli.options.shapes_hint_runs), the hint becomes that command with a ``--shapes`` that
    fills them, runnable as printed; ``hint`` is what a library caller sees."""

    def __init__(self, message: str, dims: Mapping[str, Sequence[int | str | None]], hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.dims = {name: list(d) for name, d in dims.items()}


class InvalidModelError(TrtconvError):
    exit_code = ExitCode.INVALID_MODEL


class UnsupportedModelError(TrtconvError):
    exit_code = ExitCode.UNSUPPORTED


class BuildError(TrtconvError):
    exit_code = ExitCode.BUILD_FAILED


class AccuracyError(TrtconvError):
    exit_code = ExitCode.ACCURACY


class PrecisionNotAchievedError(TrtconvError):
    exit_code = ExitCode.PRECISION_NOT_ACHIEVED


class BackendUnavailableError(TrtconvError):
    exit_code = ExitCode.TENSORRT_UNAVAILABLE


class OutputError(TrtconvError):
    exit_code = ExitCode.IO_ERROR


class DataError(TrtconvError):
    exit_code = ExitCode.BAD_DATA


class OutOfMemoryError(TrtconvError):
    """An allocation failed: Python's MemoryError, or ONNX Runtime's/protobuf's bad_alloc."""

    exit_code = ExitCode.OUT_OF_MEMORY


# How C++ libraries word a failed allocation when it reaches Python as an exception
# (ONNX Runtime: "bad_alloc", "Failed to allocate memory"; glibc's ENOMEM text; CPython
# when a thread's stack cannot be mapped; the dynamic loader when a library cannot be mapped).
_ALLOCATION_WORDS = ("bad_alloc", "bad allocation", "failed to allocate", "cannot allocate memory",
                     "unable to allocate", "out of memory", "can't start new thread",
                     "failed to map segment")


def is_allocation_failure(exc: BaseException) -> bool:
    """True when ``exc``, or an exception it was raised from, is a failed allocation."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, MemoryError) or (isinstance(cur, OSError) and cur.errno == 12):  # ENOMEM
            return True
        text = str(cur).lower()
        if any(w in text for w in _ALLOCATION_WORDS):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


class InternalError(TrtconvError):
    """A broken invariant inside trtconv; the CLI prints the traceback."""

    exit_code = ExitCode.INTERNAL
