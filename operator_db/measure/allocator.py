"""Host-memory allocator set-up for CPU measurements (glibc's malloc).

glibc gives freed memory back to the kernel (trim, and munmap of large blocks), so the next large
tensor lands on fresh pages and pays a page fault per 4 KiB page. An operator looped alone reuses
its freed output block and never pays; a whole model, allocating many sizes, pays on most layers
(ResNet-50 at batch 1: about 4,200 faults per forward on our CPU). Keeping freed memory in the
process treats both alike, as PyTorch's caching allocator does on GPUs. Huge pages for the heap
can only be asked for at a process's start (``operator_db/cli/process_env.py``); this module
reports whether they were.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache
from pathlib import Path

_state = "default"

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
"""glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems, in bytes."""
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
"""The kernel's transparent huge page mode: ``always``, ``madvise`` or ``never`` in brackets."""


@lru_cache(maxsize=1)
def retain_freed_memory() -> str:
    """Ask glibc to keep freed memory (once per process); return what was done, for provenance."""
    name = ctypes.util.find_library("c")
    if name is None:
        return "unchanged: no C library found"
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "unchanged: the C library has no mallopt (not glibc)"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = all(
        mallopt(param, value) == 1
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
            (M_TRIM_THRESHOLD, 2**30),
            (M_TOP_PAD, 64 * 1024 * 1024),
        )
    )
    if not ok:
        return "unchanged: mallopt refused"
    global _state
    _state = "glibc: freed memory retained (mmap threshold 32 MiB, trim threshold 1 GiB)"
    return _state


def huge_pages_state() -> str:
    """Say whether this process's glibc heap was asked for huge pages, and the kernel's THP mode.

    A measuring command asks at its start (``operator_db/cli/process_env.py``).
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    asked = "glibc.malloc.hugetlb=1" in tunables or "glibc.malloc.hugetlb=2" in tunables
    try:
        mode = Path(THP_ENABLED).read_text().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        mode = "unknown"
    return f"huge pages {'asked' if asked else 'not asked'} (THP {mode})"


def allocator_state() -> str:
    """Say how this process's host allocator is set up (for measurement provenance)."""
    return f"{_state}; {huge_pages_state()}"
