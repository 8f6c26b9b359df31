"""Doc-major bit rows of the frequent dims: their transpose from the bitmaps, and counts of a few documents.

The cascade's second pass counts, for a few hundred candidates, the query's frequent dims (active in more than
the first pass's share of documents). Testing one bitmap bit per candidate and dim is a cache miss each (~10 ns,
~1.2 ms for 300 candidates x ~350 dims at 1M documents); a document's own row of those dims is read in one
sequential sweep instead (~0.25 us a candidate).
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.kernels.bits import popcount, trailing_zeros

TRANSPOSE_WORDS = 8  # bitmap words per transpose block: 512 documents, whose rows (~1 MB) stay in L2


@numba.njit(cache=True, nogil=True)
def transpose_rows(rows, bitmaps, words, dims, n_documents, first_block, last_block, out):
    """out[doc, c >> 6] bit c & 63 = dims[c] active in doc, for the documents of word blocks first..last-1.

    dims: bitmap-stored dims (rows[d] >= 0), in column order; out: (n_documents, ceil(len(dims) / 64)) zeros.
    Reads each bitmap a block of words at a time, so the block's rows are written while they stay in cache.
    """
    for block in range(first_block, last_block):
        w0 = block * TRANSPOSE_WORDS
        w1 = min(words, w0 + TRANSPOSE_WORDS)
        for c in range(dims.shape[0]):
            base = np.int64(rows[dims[c]]) * words
            word = c >> 6
            bit = np.uint64(1) << np.uint64(c & 63)
            for w in range(w0, w1):
                x = bitmaps[base + w]
                while x:
                    doc = w * 64 + trailing_zeros(x)
                    if doc < n_documents:
                        out[doc, word] |= bit
                    x &= x - np.uint64(1)


WEIGHT_BITS = 4  # quantized query weights are 1..15 (levels.py)


@numba.njit(cache=True, nogil=True)
def forward_counts(rows, column, qdims, qvals, quantized, docs, counts, outside):
    """counts[i] += the query dims in the store active in docs[i] (each its integer weight when `quantized`);
    outside[j] = query entry j has no column (the caller probes it).

    rows: (n_documents, n_words) doc-major bits; column: dim -> column or -1. The query's columns become one mask
    per weight bit (a dim of weight v is in mask j for every set bit j of v: at most 4 sweeps of a row, 1 for a
    binary query); a full sweep of each row (sequential, vectorized) beats gathering only the query's words.
    """
    n_words = rows.shape[1]
    masks = np.zeros((WEIGHT_BITS, n_words), np.uint64)
    used = np.zeros(WEIGHT_BITS, np.bool_)
    for j in range(qdims.shape[0]):
        c = column[qdims[j]]
        outside[j] = c < 0
        if c >= 0:
            v = np.int64(qvals[j]) if quantized else 1
            for bit in range(WEIGHT_BITS):
                if (v >> bit) & 1:
                    masks[bit, c >> 6] |= np.uint64(1) << np.uint64(c & 63)
                    used[bit] = True
    for bit in range(WEIGHT_BITS):
        if not used[bit]:
            continue
        mask = masks[bit]
        for i in range(docs.shape[0]):
            row = rows[docs[i]]
            n = np.int64(0)
            for w in range(n_words):
                n += popcount(row[w] & mask[w])
            counts[i] += n << bit
