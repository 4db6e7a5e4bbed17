"""How much memory this process can still take: a stage that knows its size refuses up
front, in one line, instead of failing inside a C++ allocator (which may crash the process)."""

from __future__ import annotations

import ctypes

try:  # POSIX only; Windows (TensorRT-RTX desktops) has no RLIMIT_AS
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

from trtconv.errors import OutOfMemoryError


def available_memory() -> int | None:
    """Bytes this process can still allocate: MemAvailable, capped by what RLIMIT_AS leaves
    of the address space (the limit less what is mapped already) if set."""
    avail: int | None = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    left = address_space_left()
    if left is not None:
        avail = left if avail is None else min(avail, left)
    return avail


def address_space_left() -> int | None:
    """What RLIMIT_AS leaves of the address space (the limit less VmSize), bytes; None without a limit."""
    if resource is None:
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - _mapped_bytes())


def _mapped_bytes() -> int:
    """This process's address space in use (VmSize), bytes; 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def ensure_room(nbytes: int, stage: str) -> None:
    """Raise OutOfMemoryError ("out of memory while ``stage``") when an address-space limit
    (RLIMIT_AS, ``ulimit -v``) leaves less than ``nbytes``: checked before protobuf copies,
    whose allocator crashes the process where malloc fails instead of raising. Without a
    limit, Linux overcommits and malloc does not fail: nothing to check (MemAvailable would
    refuse work that swap could still do)."""
    left = address_space_left()
    if left is not None and nbytes > left:
        raise OutOfMemoryError(f"out of memory while {stage}")


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_BLOCK = 1 << 20


def return_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Ask glibc to give every block of at least ``threshold`` bytes its own mapping, returned
    to the system when freed (True where it agreed).

    By default glibc raises that threshold (up to 32 MiB) each time such a block is freed, so
    the activations, weights and serialized models of one stage, tens of MiB apiece, end up
    on the heap and stay part of the process's RSS after they are freed: the stages after it
    (ONNX Runtime sessions one after the other) then start from a higher floor. A fixed
    threshold keeps that floor where the live data is. Elsewhere (musl, macOS, Windows): False. The price: each
    such block freed and allocated again is faulted in afresh (ddddocr's INT8 run: 2.1 M page faults, a quarter
    of its CPU seconds), so ``quantize`` and ``build`` ask for it only where the model is large (``load.large_weights``).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
