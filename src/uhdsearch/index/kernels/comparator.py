"""Candidates of a binary query scored by one bucket: the documents whose bitmap count can still enter the heap."""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.kernels.bits import trailing_zeros
from uhdsearch.index.kernels.heap import push

# words per comparator call: the heap's threshold is read again between blocks, so a chunk's later documents face
# the bar its earlier ones raised (one threshold per 131,072-document chunk let through 15-20 % more work at 1M;
# blocks of 16-32 words cost more in per-call set-up than they save with length classes)
BLOCK_WORDS = 128


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
def _need(weight, scale, n_planes, worst):
    """The smallest count whose score at this length factor beats `worst`: the comparison the scores make, so
    float rounding cannot drop a document that belongs in the heap."""
    need = 0
    if scale != 1.0:  # a first guess never above the answer, then the exact comparison
        need = min(max(0, np.int64(worst / (weight * scale) * (1.0 - 1e-9)) - 1), 1 << n_planes)
    while need < (1 << n_planes) and (weight * np.float64(need)) * scale <= worst:
        need += 1
    return need


@numba.njit(cache=True)
def at_least_each(planes, q, cw, n_planes, n_w, needs, class_bits, n_words, w0, hits, equal, thresholds):
    """hits[w] = the documents of word w whose count is >= the need of their own length class, all classes in one
    comparator pass: bit j of every document's need is gathered into threshold plane j from the class bitmaps
    (class_bits: class c's words from c n_words; w0: the chunk's first word). needs[c] == 2**n_planes: class c
    cannot enter. thresholds: n_planes cw words of scratch."""
    never = 1 << n_planes
    for j in range(n_planes):
        t = thresholds[j * cw:j * cw + n_w]
        t[:] = 0
        for c in range(needs.shape[0]):
            if needs[c] < never and (needs[c] >> j) & 1:
                members = class_bits[c * n_words + w0:c * n_words + w0 + n_w]
                for w in range(n_w):
                    t[w] |= members[w]
    hits[:n_w] = 0
    equal[:n_w] = ~np.uint64(0)
    for c in range(needs.shape[0]):
        if needs[c] >= never:
            members = class_bits[c * n_words + w0:c * n_words + w0 + n_w]
            for w in range(n_w):
                equal[w] &= ~members[w]
    for j in range(n_planes - 1, -1, -1):  # from the top plane: above the need, or equal to it so far
        plane = planes[q + j * cw:q + j * cw + n_w]
        t = thresholds[j * cw:j * cw + n_w]
        for w in range(n_w):
            p = plane[w]
            hits[w] |= equal[w] & p & ~t[w]
            equal[w] &= ~(p ^ t[w])
    for w in range(n_w):
        hits[w] |= equal[w]


@numba.njit(cache=True)
def sole_bucket_hits(planes, q, cw, n_planes, n_w, m, weight, hits, equal, deleted, c0, size, k, out_scores,
                     out_docs, scales, class_bits, class_max, w0, thresholds):
    """Offer the chunk's documents that can beat the full heap, scored by one bucket; returns the heap size.

    The planes hold each document's whole count (bitmap and list dims alike), so the threshold is exact.

    scales: empty, or each document's length factor (kernels/lengths.py): then each length class of the chunk's
    documents (class_bits, words from w0 on) needs the count its own largest factor needs (thresholds: scratch of
    n_planes cw words).
    """
    normed = scales.shape[0] > 0
    if not normed:
        need = _need(weight, 1.0, n_planes, out_scores[0])
        if need == 1 << n_planes:
            return size
        at_least(planes, q, cw, n_planes, n_w, need, hits, equal)
    else:
        needs = np.empty(class_max.shape[0], np.int64)
        for c in range(class_max.shape[0]):  # an empty class (fewer documents than classes) has no members
            needs[c] = _need(weight, class_max[c], n_planes, out_scores[0]) if class_max[c] > 0.0 else 1 << n_planes
        if needs.min() == 1 << n_planes:  # no class can enter the heap
            return size
        at_least_each(planes, q, cw, n_planes, n_w, needs, class_bits, class_bits.shape[0] // class_max.shape[0],
                      w0, hits, equal, thresholds)
    for w in range(n_w):
        x = hits[w]
        while x:
            bit = trailing_zeros(x)
            x &= x - np.uint64(1)
            i = w * 64 + bit
            if i >= m:  # bits come out in ascending order; need == 0 sets the bits past the last document too
                break
            count = np.int64(0)
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


@numba.njit(cache=True)
def sole_bucket_blocks(planes, q, cw, n_planes, w_start, n_w, m, weight, hits, equal, deleted, c0, size, k,
                       out_scores, out_docs, scales, class_bits, class_max, w0, thresholds):
    """sole_bucket_hits over words w_start..n_w-1 of the chunk (m documents from c0), BLOCK_WORDS at a time."""
    for s in range(w_start, n_w, BLOCK_WORDS):
        e = min(n_w, s + BLOCK_WORDS)
        size = sole_bucket_hits(planes, q + s, cw, n_planes, e - s, min(m, e * 64) - s * 64, weight, hits, equal,
                                deleted, c0 + s * 64, size, k, out_scores, out_docs, scales, class_bits, class_max,
                                w0 + s, thresholds)
    return size
