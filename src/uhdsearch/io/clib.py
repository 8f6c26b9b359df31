"""The C library through ctypes, for the calls Python lacks (renameat2 for the swap, madvise for prefaulting)."""
from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc():
    """The C library through ctypes, or None where there is none (Windows wants a library name)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None
