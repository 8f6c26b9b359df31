"""Counts of a few given documents: each query dim's bitmap bit tested, or its packed list sought by block.

The cascade's second pass (search/cascade.py) scores a short candidate list against the frequent dims that the
first pass left out. Reading those dims whole is what the cascade avoids: a bitmap is tested only at the
candidates' words, and a packed list decodes only the blocks that could hold a candidate.
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.codec import BLOCK, decode_block
from uhdsearch.index.kernels.lists import first_block


@numba.njit(cache=True)
def probe_counts(indptr, rows, bitmaps, block_ptr, payload_ptr, blocks, payload, words, qdims, qvals, quantized,
                 docs, counts):
    """counts[i] += (1, or the dim's integer weight when `quantized`) for every query dim active in docs[i].

    docs: ascending doc numbers (int64), each < the index's size.
    """
    n = docs.shape[0]
    buffer = np.empty(BLOCK, np.int64)
    for j in range(qdims.shape[0]):
        d = qdims[j]
        step = np.int64(qvals[j]) if quantized else np.int64(1)
        r = rows[d]
        if r >= 0:
            base = np.int64(r) * words
            for i in range(n):  # branch-free: the loads do not wait on each other (a branch per bit mispredicts)
                doc = docs[i]
                counts[i] += np.int64((bitmaps[base + (doc >> 6)] >> np.uint64(doc & 63)) & np.uint64(1)) * step
            continue
        start, end = block_ptr[d], block_ptr[d + 1]
        if start == end:
            continue
        decoded = -1  # the block in `buffer`
        size = 0
        for i in range(n):
            doc = docs[i]
            block = first_block(blocks, start, end, doc)
            if block != decoded:
                if np.int64(blocks[2 * block]) > doc:  # before the dim's first posting
                    continue
                size = min(BLOCK, indptr[d + 1] - indptr[d] - (block - start) * BLOCK)
                decode_block(blocks, payload, payload_ptr[d], block, size, buffer, 0)
                decoded = block
            lo, hi = 0, size
            while lo < hi:  # first position >= doc
                mid = (lo + hi) // 2
                if buffer[mid] < doc:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < size and buffer[lo] == doc:
                counts[i] += step
