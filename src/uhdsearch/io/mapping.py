"""Memory-mapped arrays: whether an array is one, and prefaulting its pages so that searches take no faults."""
from __future__ import annotations

import ctypes
import functools
import mmap
import threading
from collections.abc import Callable, Sequence

import numpy as np

from uhdsearch.io.clib import libc


_MADV_WILLNEED = 3
_MADV_POPULATE_READ = 22  # Linux 5.14+; Python's mmap module has no constant for it yet


def is_memory_mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a file mapping (np.load(mmap_mode=...) or a view of one), not heap memory."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap) or getattr(base, "_mmap", None) is not None:
            return True  # a copy of an np.memmap is still an np.memmap, but with _mmap None and heap data
        base = getattr(base, "base", None)
    return False



@functools.cache
def _madvise():
    """libc's madvise through ctypes, or None where there is none."""
    madvise = getattr(libc(), "madvise", None)
    if madvise is None:
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise


def prefault(array: np.ndarray) -> str:
    """Map a memory-mapped array's pages into the process now, so that later reads take no page faults.

    Blocks until done (MADV_POPULATE_READ), and Ctrl-C waits for it; where the kernel lacks it, asks for
    read-ahead instead (MADV_WILLNEED, which returns at once). Called through ctypes, which releases the GIL,
    so a background thread may do it while searches go on.

    Returns:
        "populated", "read-ahead", or "skipped" (not memory-mapped, empty, not contiguous, or no madvise on
        this platform).

    Examples:
        >>> prefault(np.zeros(10))  # heap memory: nothing to do
        'skipped'
    """
    madvise = _madvise()
    if madvise is None or array.nbytes == 0 or not array.flags.c_contiguous or not is_memory_mapped(array):
        return "skipped"
    page = mmap.PAGESIZE
    address = array.ctypes.data
    start = address - address % page
    length = array.nbytes + (address - start)
    if madvise(start, length, _MADV_POPULATE_READ) == 0:
        return "populated"
    if madvise(start, length, _MADV_WILLNEED) == 0:
        return "read-ahead"
    return "skipped"


def prefault_all(arrays: Sequence[np.ndarray], background: bool = False) -> threading.Thread | None:
    """`prefault` each array, here or in a daemon thread.

    Returns:
        the thread when `background` (join it to wait), else None.
    """
    if not background:
        for a in arrays:
            prefault(a)
        return None
    thread = threading.Thread(target=prefault_all, args=(arrays,), name="uhdsearch-prefault", daemon=True)
    thread.start()
    return thread


def now_or_in_background(work: Callable[[], None], background: bool) -> threading.Thread | None:
    """Run `work` here, or in a daemon thread that is returned (join it to wait)."""
    if not background:
        work()
        return None
    thread = threading.Thread(target=work, name="uhdsearch-warm-up", daemon=True)
    thread.start()
    return thread
