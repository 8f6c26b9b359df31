"""Bit-packed posting lists (codec.py's blocks), added term at a time into per-chunk counters or values."""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.codec import BLOCK
from uhdsearch.index.kernels.bitmaps import plane_add


@numba.njit(cache=True)
def first_block(blocks, start, end, doc):
    """Last block in [start, end) whose first doc is <= doc (or `start`)."""
    lo, hi = start, end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if np.int64(blocks[2 * mid]) <= doc:
            lo = mid
        else:
            hi = mid
    return lo


# A list at least this long, and with at least one posting per ROW_LIST_SHARE documents, is counted as a bitmap row
# built per chunk (set bit by bit, then through the carry-save adder with the stored rows) instead of posting by
# posting into the counters: at 1M documents a median first-pass query's 2 list dims (11.6k postings) cost ~0.2 ms
# through plane_add (~17 ns a posting, a carry chain each), and ~0.01 ms as rows.
ROW_LIST_MIN = 64
ROW_LIST_SHARE = 2048


@numba.njit(cache=True, inline="always")
def counted_as_row(n_postings, n_documents):
    return n_postings >= ROW_LIST_MIN and n_postings * ROW_LIST_SHARE >= n_documents


@numba.njit(cache=True)
def add_lists(indptr, rows, block_ptr, payload_ptr, blocks, payload, weights, qdims, qvals, lo_j, hi_j, cursor,
              position, pending, c_off, c0, c1, weighted, quantized, values, planes, q, cw, n_planes, slots,
              list_rows, as_rows):
    """Term at a time over packed lists for documents c0..c1-1.

    Counts add 1 per shared dim, or the query dim's integer weight when `quantized`, into the chunk's bit-sliced
    planes (plane j of word w at planes[q + j cw + w], bitmaps.plane_add); `weighted` adds into `values`.
    slots[e] >= 0: entry e's postings instead set bits of row slots[e] of `list_rows` (cw words a row, bit i of
    word w = document c0 + 64 w + i), for the adder to count. as_rows: this call decodes those entries only (before
    the adder), else only the others (after it: the adder sets the planes).

    Each query entry keeps its decoding state between chunks: block, position in the block and the decoded
    doc number not yet counted, so no block is decoded twice.
    """
    for j in range(lo_j, hi_j):
        d = qdims[j]
        if rows[d] >= 0:
            continue
        e = j - c_off
        slot = slots[e]
        if (slot >= 0) != as_rows:
            continue
        block = cursor[e]
        end_block = block_ptr[d + 1]
        if block >= end_block:
            continue
        doc = pending[e]
        if doc >= c1:
            continue
        i = position[e]
        q_value = np.float64(qvals[j])
        step = np.int64(qvals[j]) if quantized else np.int64(1)
        first_posting = indptr[d] + (block - block_ptr[d]) * BLOCK
        count = min(BLOCK, indptr[d + 1] - first_posting)
        meta = np.int64(blocks[2 * block + 1])
        bits = meta & 31
        start = payload_ptr[d] + (meta >> 5)
        mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
        while True:
            if doc >= c0:
                if slot >= 0:
                    list_rows[slot * cw + ((doc - c0) >> 6)] |= np.uint64(1) << np.uint64((doc - c0) & 63)
                elif weighted:
                    values[doc - c0] += q_value * np.float64(weights[first_posting + i])
                else:
                    plane_add(planes, q, cw, n_planes, (doc - c0) >> 6, (doc - c0) & 63, step)
            i += 1
            if i < count:
                at = (i - 1) * bits
                word = start + (at >> 5)
                pair = np.uint64(payload[word]) | (np.uint64(payload[word + 1]) << np.uint64(32))
                doc += np.int64((pair >> np.uint64(at & 31)) & mask) + 1
            else:
                block += 1
                if block >= end_block:
                    break
                i = 0
                first_posting += count
                count = min(BLOCK, indptr[d + 1] - first_posting)
                meta = np.int64(blocks[2 * block + 1])
                bits = meta & 31
                start = payload_ptr[d] + (meta >> 5)
                mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
                doc = np.int64(blocks[2 * block])
            if doc >= c1:
                break
        cursor[e] = block
        position[e] = i
        pending[e] = doc
