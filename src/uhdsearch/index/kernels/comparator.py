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


@numba.njit(cache=True, inline="always")
def _need(weight, n_lists, scale, n_planes, worst):
    """The smallest count whose best score (every list dim too, at this length factor) beats `worst`: the
    comparison the scores make, so float rounding cannot drop a document that belongs in the heap."""
    need = 0
    if scale != 1.0:  # a first guess never above the answer, then the exact comparison
        need = min(max(0, np.int64(worst / (weight * scale) * (1.0 - 1e-9)) - n_lists - 1), 1 << n_planes)
    while need < (1 << n_planes) and (weight * np.float64(n_lists + need)) * scale <= worst:
        need += 1
    return need


@numba.njit(cache=True)
def sole_bucket_hits(planes, q, cw, n_planes, n_w, m, n_lists, weight, list_counts, hits, equal, deleted, c0,
                     size, k, out_scores, out_docs, scales, class_bits, class_max, w0, class_hits):
    """Offer the chunk's documents that can beat the full heap, scored by one bucket; returns the heap size.

    scales: empty, or each document's length factor (kernels/lengths.py): then each length class of the chunk's
    documents (class_bits, words from w0 on) gets the count its own largest factor needs (class_hits: scratch).
    """
    normed = scales.shape[0] > 0
    if not normed:
        need = _need(weight, n_lists, 1.0, n_planes, out_scores[0])
        if need == 1 << n_planes:
            return size
        at_least(planes, q, cw, n_planes, n_w, need, hits, equal)
    else:
        hits[:n_w] = 0
        n_words = class_bits.shape[0] // class_max.shape[0]
        for c in range(class_max.shape[0]):
            if class_max[c] == 0.0:  # an empty class (fewer documents than classes)
                continue
            need = _need(weight, n_lists, class_max[c], n_planes, out_scores[0])
            if need == 1 << n_planes:
                continue
            at_least(planes, q, cw, n_planes, n_w, need, class_hits, equal)
            members = class_bits[c * n_words + w0:c * n_words + w0 + n_w]
            for w in range(n_w):
                hits[w] |= class_hits[w] & members[w]
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
            if normed:  # as the general path sums it
                score = 0.0 + (weight * np.float64(count)) * scales[c0 + i]
            else:
                score = 0.0 + weight * np.float64(count)
            if score > out_scores[0]:
                if deleted.shape[0] and deleted[c0 + i]:
                    continue
                size = push(out_scores, out_docs, size, k, score, c0 + i)
    return size
