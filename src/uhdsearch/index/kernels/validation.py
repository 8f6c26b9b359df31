"""Load-time check of packed blocks, O(blocks): corrupt offsets must not send the kernels out of bounds."""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.codec import BLOCK


@numba.njit(cache=True)
def blocks_are_valid(indptr, block_ptr, payload_ptr, blocks, n_documents):
    """Cheap load-time check: every block's first doc is in range and above the block before it in its dim, and
    its packed bits lie in its dim's payload."""
    for d in range(indptr.shape[0] - 1):
        remaining = indptr[d + 1] - indptr[d]
        size = payload_ptr[d + 1] - payload_ptr[d]
        previous = np.int64(-1)
        for block in range(block_ptr[d], block_ptr[d + 1]):
            count = min(BLOCK, remaining)
            remaining -= count
            first = np.int64(blocks[2 * block])
            meta = np.int64(blocks[2 * block + 1])
            if first >= n_documents or first <= previous:
                return False
            if (meta >> 5) + ((meta & 31) * (count - 1) + 31) // 32 > size:
                return False
            previous = first
    return True
