"""The C allocator's one setting for a long agent session (``corral run``, ``chat``, ``rpc``).

A model request carries the whole transcript: its JSON body and the buffers that
build it grow with the transcript up to the compaction threshold (400 kB, so a few
transient buffers of that size per request). glibc maps a buffer of 128 KiB or
more and unmaps it when freed, but after the first such free it raises its mmap
threshold to that size ("dynamic threshold"), so the later ones come from the heap,
and the heap keeps what they leave behind. The session's RSS then climbs through
its first compaction cycle and stays at that high-water mark (measured with
bench_soak, 600 prompts: 46.7 -> 52.0 MiB; with a fixed threshold 46.9 -> 49.0
MiB). Setting the threshold explicitly (to glibc's own default, 128 KiB) turns the
dynamic adjustment off: large transient buffers go back to the system when freed,
for a few system calls per model request.

Only the CLI sets it (the process is corral's); an embedder's process is its own.
Elsewhere than glibc (musl's ``mallopt`` does nothing, macOS has none) nothing
changes.
"""

from __future__ import annotations

import sys

__all__ = ["MMAP_THRESHOLD", "unpool_large_buffers"]

#: Bytes from which glibc maps an allocation on its own (its default; kept fixed).
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # malloc.h


def unpool_large_buffers() -> bool:
    """Fix glibc's mmap threshold (see the module docstring); True when it was set."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only the commands that run a session need it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
