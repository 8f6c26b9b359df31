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


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def return_large_blocks(threshold: int = 1 << 20) -> bool:
    """Serve every allocation of `threshold` bytes or more from its own mapping, given back when freed.

    glibc raises its mmap threshold each time a large block is freed (up to 32 MB), after which the WTA product's
    tens of megabytes per document come from the heap and fragment it: a service's resident memory then grows with
    every request (+18 % in a minute of /explain load). A fixed threshold turns that off. Returns whether the C
    library took it (False without glibc).
    """
    lib = libc()
    mallopt = getattr(lib, "mallopt", None) if lib is not None else None
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, int(threshold)) == 1)
