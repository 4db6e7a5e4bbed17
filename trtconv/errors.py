"""The one exception hierarchy and the one table of exit codes.

Every command ends through :class:`ExitCode`: stages raise a :class:`TrtconvError`
subclass, and only ``trtconv.cli.main`` turns it into a process exit status, so a
Makefile or CI step can rely on the numbers documented in ``docs/exit-codes.md``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


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
    INTERRUPTED = 130  # Ctrl-C


class TrtconvError(Exception):
    """A failure the user can act on: printed as one line plus a hint, no traceback."""

    exit_code: ClassVar[ExitCode] = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(TrtconvError):
    exit_code = ExitCode.USAGE


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


class InternalError(TrtconvError):
    """A broken invariant inside trtconv; the CLI prints the traceback."""

    exit_code = ExitCode.INTERNAL
