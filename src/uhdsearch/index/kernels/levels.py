"""The bit-sliced adder: bitmap rows into one counter, each row with an integer weight (1 for binary queries).

Binary scoring gives every row weight 1; quantized scoring (integer query weights over binary documents, e.g. 4-bit
IDF) gives a dim of weight v = sum_j 2^j b_j its bitmap shifted to plane j for every set bit j. Each bitmap row is
read once: rows of equal weight go through a 15-input carry-save tree together (11 adders per word). A weight with
one set bit adds the tree's 4-bit count at its plane; any other weight counts its rows in a counter of its own and
adds that counter once per set bit and chunk (adding every group's count at every set bit cost 1.5-2.5x binary at
100k documents; this costs 1.2-1.3x). The carry out of the 4-bit adds waits in a buffer and is summed 15 at a time,
so the ripple through the upper planes is rare. The counter then holds the weighted sum, so the one-bucket comparator
and per-word bound prune as for binary. List-encoded dims add their weight into the same planes, posting by posting
(lists.py, bitmaps.plane_add), after this adder has set them.
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.index.kernels.bitmaps import csa, ripple

MAX_LEVEL = 15  # 4-bit weights: the planes' shifts stay below 4
SCRATCH_PLANES = 60 + 17  # accumulate_levels's scratch, in chunk words: deferred carries, one level's counter


def check_levels(queries) -> int:
    """The largest weight level of `queries`; raises UsageError unless every value is an integer in 1..15."""
    top = 0
    for m in queries.buckets:
        if m.nnz == 0:
            continue
        data = np.asarray(m.data)
        if np.any(data < 1) or np.any(data > MAX_LEVEL) or np.any(data != np.round(data)):
            raise UsageError(f"quantized scoring needs integer query values in 1..{MAX_LEVEL}; got values from "
                             f"{float(data.min())} to {float(data.max())}")
        top = max(top, int(data.max()))
    return top


@numba.njit(cache=True, inline="always")
def _csa15(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14):
    """15 words in, the 4-bit count (s0, s1, s2, s3) of each of their 64 bit positions out (11 adders)."""
    a1, c1 = csa(x0, x1, x2)
    a2, c2 = csa(x3, x4, x5)
    a3, c3 = csa(x6, x7, x8)
    a4, c4 = csa(x9, x10, x11)
    a5, c5 = csa(x12, x13, x14)
    e1, d1 = csa(a1, a2, a3)
    s0, d2 = csa(a4, a5, e1)
    f1, g1 = csa(c1, c2, c3)
    f2, g2 = csa(c4, c5, d1)
    s1, g3 = csa(f1, f2, d2)
    s2, s3 = csa(g1, g2, g3)
    return s0, s1, s2, s3


@numba.njit(cache=True, inline="always")
def _add4(p0, p1, p2, p3, w, s0, s1, s2, s3):
    """Add the 4-bit number (s3 s2 s1 s0) into word w of planes p0..p3; returns the carry out."""
    p = p0[w]
    c = p & s0
    p0[w] = p ^ s0
    p = p1[w]
    t = p ^ s1
    p1[w] = t ^ c
    c = (p & s1) | (c & t)
    p = p2[w]
    t = p ^ s2
    p2[w] = t ^ c
    c = (p & s2) | (c & t)
    p = p3[w]
    t = p ^ s3
    p3[w] = t ^ c
    return (p & s3) | (c & t)


@numba.njit(cache=True, inline="always")
def _planes4(planes, j, cw, n_w):
    return (planes[j * cw:j * cw + n_w], planes[(j + 1) * cw:(j + 1) * cw + n_w],
            planes[(j + 2) * cw:(j + 2) * cw + n_w], planes[(j + 3) * cw:(j + 3) * cw + n_w])


@numba.njit(cache=True, inline="always")
def _mask(i, n_in):
    """All ones for input i of a group of n_in, zero for the padding inputs."""
    return ~np.uint64(0) if i < n_in else np.uint64(0)


@numba.njit(cache=True, inline="always")
def _row(bitmaps, bases, g, i, n_in, w0, n_w):
    """Input i of the group of rows bases[g:g+n_in]: its words w0.., the last row again past n_in (masked)."""
    at = bases[g + min(i, n_in - 1)] + w0
    return bitmaps[at:at + n_w]


@numba.njit(cache=True, inline="always")
def _slot(pending, j, i, count, cw, n_w):
    at = (j * 15 + min(i, count - 1)) * cw
    return pending[at:at + n_w]


@numba.njit(cache=True)
def _flush(planes, cw, j, n_planes, n_w, pending, count, carry):
    """Add the `count` carry words pending at shift j (each of weight 2^(j+4)) into planes j+4..: one 15-input
    tree and one 4-bit add, then the ripple up (once per 15 adds, not once per add)."""
    x0, x1, x2, x3, x4 = (_slot(pending, j, 0, count, cw, n_w), _slot(pending, j, 1, count, cw, n_w),
                          _slot(pending, j, 2, count, cw, n_w), _slot(pending, j, 3, count, cw, n_w),
                          _slot(pending, j, 4, count, cw, n_w))
    x5, x6, x7, x8, x9 = (_slot(pending, j, 5, count, cw, n_w), _slot(pending, j, 6, count, cw, n_w),
                          _slot(pending, j, 7, count, cw, n_w), _slot(pending, j, 8, count, cw, n_w),
                          _slot(pending, j, 9, count, cw, n_w))
    x10, x11, x12, x13, x14 = (_slot(pending, j, 10, count, cw, n_w), _slot(pending, j, 11, count, cw, n_w),
                               _slot(pending, j, 12, count, cw, n_w), _slot(pending, j, 13, count, cw, n_w),
                               _slot(pending, j, 14, count, cw, n_w))
    m0, m1, m2, m3, m4 = _mask(0, count), _mask(1, count), _mask(2, count), _mask(3, count), _mask(4, count)
    m5, m6, m7, m8, m9 = _mask(5, count), _mask(6, count), _mask(7, count), _mask(8, count), _mask(9, count)
    m10, m11, m12, m13, m14 = (_mask(10, count), _mask(11, count), _mask(12, count), _mask(13, count),
                               _mask(14, count))
    p0, p1, p2, p3 = _planes4(planes, j + 4, cw, n_w)
    for w in range(n_w):
        t0, t1, t2, t3 = _csa15(x0[w] & m0, x1[w] & m1, x2[w] & m2, x3[w] & m3, x4[w] & m4, x5[w] & m5,
                                x6[w] & m6, x7[w] & m7, x8[w] & m8, x9[w] & m9, x10[w] & m10, x11[w] & m11,
                                x12[w] & m12, x13[w] & m13, x14[w] & m14)
        carry[w] = _add4(p0, p1, p2, p3, w, t0, t1, t2, t3)
    ripple(planes, cw, j + 8, n_planes, n_w, carry)


@numba.njit(cache=True, inline="always")
def _carry_slot(planes, cw, j, n_planes, n_w, pending, n_pending, carry):
    """The words that take the carry out of the next add at shift j (flushing the 15 pending first if full)."""
    if n_pending[j] == 15:
        _flush(planes, cw, j, n_planes, n_w, pending, 15, carry)
        n_pending[j] = 0
    at = (j * 15 + n_pending[j]) * cw
    n_pending[j] += 1
    return pending[at:at + n_w]


@numba.njit(cache=True)
def _add_group(bitmaps, bases, g, n_in, w0, n_w, target, shift, cw, out):
    """target planes shift..shift+3 += the count of rows bases[g:g+n_in] (1 <= n_in <= 15), words w0..w0+n_w;
    the carry out of plane shift+3 goes to `out` (the caller ripples or defers it)."""
    # slices, not base + w: the index is then provably in range, which lets LLVM vectorize the loop
    r0, r1, r2 = _row(bitmaps, bases, g, 0, n_in, w0, n_w), _row(bitmaps, bases, g, 1, n_in, w0, n_w), \
        _row(bitmaps, bases, g, 2, n_in, w0, n_w)
    r3, r4, r5 = _row(bitmaps, bases, g, 3, n_in, w0, n_w), _row(bitmaps, bases, g, 4, n_in, w0, n_w), \
        _row(bitmaps, bases, g, 5, n_in, w0, n_w)
    r6, r7, r8 = _row(bitmaps, bases, g, 6, n_in, w0, n_w), _row(bitmaps, bases, g, 7, n_in, w0, n_w), \
        _row(bitmaps, bases, g, 8, n_in, w0, n_w)
    r9, r10, r11 = _row(bitmaps, bases, g, 9, n_in, w0, n_w), _row(bitmaps, bases, g, 10, n_in, w0, n_w), \
        _row(bitmaps, bases, g, 11, n_in, w0, n_w)
    r12, r13, r14 = _row(bitmaps, bases, g, 12, n_in, w0, n_w), _row(bitmaps, bases, g, 13, n_in, w0, n_w), \
        _row(bitmaps, bases, g, 14, n_in, w0, n_w)
    p0, p1, p2, p3 = _planes4(target, shift, cw, n_w)
    if n_in == 15:
        for w in range(n_w):
            s0, s1, s2, s3 = _csa15(r0[w], r1[w], r2[w], r3[w], r4[w], r5[w], r6[w], r7[w], r8[w], r9[w],
                                    r10[w], r11[w], r12[w], r13[w], r14[w])
            out[w] = _add4(p0, p1, p2, p3, w, s0, s1, s2, s3)
        return
    # a short group repeats its last row; the masks zero the repeats (they are in L1: no extra memory traffic)
    m0, m1, m2, m3, m4 = _mask(0, n_in), _mask(1, n_in), _mask(2, n_in), _mask(3, n_in), _mask(4, n_in)
    m5, m6, m7, m8, m9 = _mask(5, n_in), _mask(6, n_in), _mask(7, n_in), _mask(8, n_in), _mask(9, n_in)
    m10, m11, m12, m13, m14 = _mask(10, n_in), _mask(11, n_in), _mask(12, n_in), _mask(13, n_in), _mask(14, n_in)
    for w in range(n_w):
        s0, s1, s2, s3 = _csa15(r0[w] & m0, r1[w] & m1, r2[w] & m2, r3[w] & m3, r4[w] & m4, r5[w] & m5,
                                r6[w] & m6, r7[w] & m7, r8[w] & m8, r9[w] & m9, r10[w] & m10, r11[w] & m11,
                                r12[w] & m12, r13[w] & m13, r14[w] & m14)
        out[w] = _add4(p0, p1, p2, p3, w, s0, s1, s2, s3)


@numba.njit(cache=True)
def _add_count(planes, cw, j, n_planes, n_w, count, n_count, carry):
    """planes += (the n_count-plane bit-sliced `count`) << j; the carry ripples up from plane j + n_count."""
    carry[:n_w] = 0
    for i in range(n_count):
        p = planes[(j + i) * cw:(j + i) * cw + n_w]
        x = count[i * cw:i * cw + n_w]
        for w in range(n_w):
            a = p[w]
            b = x[w]
            c = carry[w]
            t = a ^ b
            p[w] = t ^ c
            carry[w] = (a & b) | (c & t)
    ripple(planes, cw, j + n_count, n_planes, n_w, carry)


@numba.njit(cache=True)
def accumulate_levels(bitmaps, bases, level_ptr, n_w, w0, n_planes, planes, cw, carry, scratch, clear=True):
    """Set planes to the per-document weighted counts for words w0..w0+n_w (clear=False: add them to the planes'
    counts, which must leave room for the sum).

    bases[level_ptr[v - 1]:level_ptr[v]] are the bitmap row starts of the dims of weight v (1..MAX_LEVEL); plane
    j of word w is planes[j cw + w]. A weight with one set bit j adds each group's count at plane j directly;
    any other weight first counts its rows in a bit-sliced counter of its own, then adds that counter once at
    each of its set bits (so the extra adds come per weight level and chunk, not per group). n_planes must hold
    the largest weighted count and be >= 8 + the highest set bit of any weight (an add at shift j writes planes
    j..j+3, its deferred carries j+4..j+7). Scratch: carry (cw words); scratch (SCRATCH_PLANES cw): the
    deferred carries, 15 words for each of the 4 shifts, then the per-level counter.
    """
    if clear:
        for j in range(n_planes):
            planes[j * cw:j * cw + n_w] = 0
    pending = scratch[:60 * cw]
    counter = scratch[60 * cw:SCRATCH_PLANES * cw]
    n_pending = np.zeros(4, np.int64)
    for v in range(1, level_ptr.shape[0]):
        lo, hi = level_ptr[v - 1], level_ptr[v]
        if hi == lo:
            continue
        if v & (v - 1) == 0:  # one set bit
            shift = 0
            while (1 << shift) != v:
                shift += 1
            for g in range(lo, hi, 15):
                out = _carry_slot(planes, cw, shift, n_planes, n_w, pending, n_pending, carry)
                _add_group(bitmaps, bases, g, min(15, hi - g), w0, n_w, planes, shift, cw, out)
            continue
        n_count = 5  # the level's count < 2^n_count; its 4-bit adds may carry into a 5th plane
        while (1 << n_count) <= hi - lo:
            n_count += 1
        for j in range(n_count):
            counter[j * cw:j * cw + n_w] = 0
        for g in range(lo, hi, 15):
            _add_group(bitmaps, bases, g, min(15, hi - g), w0, n_w, counter, 0, cw, carry)
            ripple(counter, cw, 4, n_count, n_w, carry)
        for j in range(4):
            if (v >> j) & 1:
                _add_count(planes, cw, j, n_planes, n_w, counter, n_count, carry)
    for j in range(4):
        if n_pending[j]:
            _flush(planes, cw, j, n_planes, n_w, pending, n_pending[j], carry)
