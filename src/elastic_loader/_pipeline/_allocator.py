"""glibc's dynamic mmap threshold, raised once per process before the first read.

Rules:
* glibc serves an allocation at or above its *mmap threshold* (128 KiB when a process starts) by
  a mapping of its own, which the kernel faults in page by page and which is unmapped when the
  block is freed. When a mapped block of at most 32 MiB is freed, glibc raises the threshold to
  that block's size (and its heap trim threshold to twice that); later blocks up to that size
  then come from the heap and stay mapped between reads. It never lowers the threshold.
* A unit's read makes buffers of up to about twice the unit's bytes (``TARGET_UNIT_BYTES``,
  8 MiB). Below that threshold each unit's buffers are fresh mappings, faulted in and unmapped
  again unit after unit: a packed pass over 200,000 documents took 560k page faults against 50k,
  and 1.35 s more system time, than with the threshold raised (docs/PIPELINE.md, "glibc's allocator").
* So the first pipeline of a process frees one block of ``NUDGE_BYTES`` it took from ``malloc``:
  the step glibc takes by itself after any such free (a process that frees a larger tensor has
  taken it already). It only raises the threshold, and glibc keeps adjusting it (setting it with
  ``mallopt`` or a ``MALLOC_*`` variable would stop that). Where the C library is not glibc, or
  ``ELASTIC_LOADER_MALLOC_NUDGE=0`` is set, or anything fails, nothing happens.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

NUDGE_BYTES = 24 * 2**20
"""The block freed once: three units' bytes, below glibc's 32 MiB ceiling for the dynamic threshold
(16 MiB measured as good as 24; 12 MiB changed nothing)."""

_lock = threading.Lock()
_done = False


def raise_mmap_threshold() -> bool:
    """Free one ``NUDGE_BYTES`` block from ``malloc`` once per process; whether it was done now."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
    if os.environ.get("ELASTIC_LOADER_MALLOC_NUDGE", "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        malloc, free = libc.malloc, libc.free
        malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        free.restype, free.argtypes = None, [ctypes.c_void_p]
        block = malloc(NUDGE_BYTES)
        if not block:
            return False
        free(block)
    except (OSError, AttributeError):  # no C library to reach: leave the allocator as it is
        return False
    return True
