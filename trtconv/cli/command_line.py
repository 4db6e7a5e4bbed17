"""Hints that are commands: the command line as the user typed it, with a flag set or taken out."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from trtconv.errors import TrtconvError


def without_flag(words: Sequence[str], flag: str) -> tuple[list[str], str]:
    """A command line's words without ``flag VALUE`` and ``flag=VALUE``, and the value it gave ('' if none)."""
    out: list[str] = []
    given, skip = "", False
    for i, w in enumerate(words):
        if skip:
            skip = False
        elif w == flag and i + 1 < len(words):
            given, skip = words[i + 1], True
        elif w.startswith(flag + "="):
            given = w.split("=", 1)[1]
        else:
            out.append(w)
    return out, given


def retry_command(words: Sequence[str], exc: TrtconvError) -> str | None:
    """The command as typed with ``exc.retry``'s flag set to its value (a switch, value "": added), the old hint
    after it as a shell comment: a hint that runs as printed (:attr:`~trtconv.errors.TrtconvError.retry`)."""
    if exc.retry is None or not words:
        return None
    flag, value = exc.retry
    if value:
        kept, _ = without_flag(words, flag)
        kept += [flag, value]
    else:  # a switch: added once
        kept = list(words) + ([] if flag in words else [flag])
    change = f"{flag} {value}" if value else flag
    rest = (exc.hint or "").removeprefix(f"{change}, ")  # a hint that opens with this very change says it once
    return shlex.join(["trtconv", *kept]) + (f"  # {rest}" if rest else "")
