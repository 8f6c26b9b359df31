"""Candidates of a binary query scored by one bucket: the documents whose bitmap count can still enter the heap."""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.kernels.bits import trailing_zeros
from uhdsearch.index.kernels.heap import push


@numba.njit(cache=True)
def at_least(planes, q, cw, n_planes, n_w, need, hits, equal):
    """hits[w] = the documents of word w whose bit-sliced count is >= need (< 2**n_planes), all words at once.

    A comparator from the top plane down: `equal` keeps the documents whose high bits so far equal need's,
    `hits` gathers those already above it. Loops over contiguous words, so it vectorizes like the adder.
    """
    hits[:n_w] = 0
    equal[:n_w] = ~np.uint64(0)
    for j in range(n_planes - 1, -1, -1):
        plane = planes[q + j * cw:q + j * cw + n_w]
        if (need >> j) & 1:
            for w in range(n_w):
                equal[w] &= plane[w]
        else:
            for w in range(n_w):
                hits[w] |= equal[w] & plane[w]
                equal[w] &= ~plane[w]
    for w in range(n_w):
        hits[w] |= equal[w]


@numba.njit(cache=True)
def sole_bucket_hits(planes, q, cw, n_planes, n_w, m, n_lists, weight, list_counts, hits, equal, deleted, c0,
                     size, k, out_scores, out_docs):
    """Offer the chunk's documents that can beat the full heap, scored by one bucket; returns the heap size."""
    need = 0  # smallest bitmap count whose best total (every list dim too) beats the heap's worst
    while need < (1 << n_planes) and weight * np.float64(n_lists + need) <= out_scores[0]:
        need += 1
    if need == 1 << n_planes:
        return size
    at_least(planes, q, cw, n_planes, n_w, need, hits, equal)
    for w in range(n_w):
        x = hits[w]
        while x:
            bit = trailing_zeros(x)
            x &= x - np.uint64(1)
            i = w * 64 + bit
            if i >= m:  # bits come out in ascending order; need == 0 sets the bits past the last document too
                break
            count = np.int64(list_counts[i]) if n_lists > 0 else np.int64(0)
            for j in range(n_planes):
                count += np.int64((planes[q + j * cw + w] >> np.uint64(bit)) & np.uint64(1)) << j
            score = 0.0 + weight * np.float64(count)  # as the general path sums it
            if score > out_scores[0]:
                if deleted.shape[0] and deleted[c0 + i]:
                    continue
                size = push(out_scores, out_docs, size, k, score, c0 + i)
    return size
