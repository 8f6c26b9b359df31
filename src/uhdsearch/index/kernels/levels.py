"""Integer query weights over binary documents as bit-planes of one bit-sliced counter (the "quantized" scoring).

A query dim of weight v = sum_j 2^j b_j adds its document bitmap into the counter once per set bit j, shifted to
plane j. Each bitmap row is read once: rows of equal weight go through the binary adder's 15-input carry-save
tree together, and its 4-bit partial count is added at every set bit of the weight (popcount(v) cheap adds into
cached planes per 15 rows). The counter then holds the weighted sum, and the one-bucket comparator and per-word
bound of binary scoring apply unchanged. List-encoded dims simply add their weight to the per-document counters.
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.index.kernels.bitmaps import csa, ripple

MAX_LEVEL = 15  # 4-bit weights: the planes' shifts stay below 4


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


@numba.njit(cache=True)
def _group_count(bitmaps, bases, g, n_in, w0, n_w, sums, cw):
    """sums planes 0-3 (at sums[j cw]) = the 4-bit counts of rows bases[g:g+n_in] (1 <= n_in <= 15), words w0.."""
    at = np.empty(15, np.int64)
    for i in range(15):
        at[i] = bases[g + min(i, n_in - 1)] + w0
    # slices, not base + w: the index is then provably in range, which lets LLVM vectorize the loop
    r0 = bitmaps[at[0]:at[0] + n_w]
    r1 = bitmaps[at[1]:at[1] + n_w]
    r2 = bitmaps[at[2]:at[2] + n_w]
    r3 = bitmaps[at[3]:at[3] + n_w]
    r4 = bitmaps[at[4]:at[4] + n_w]
    r5 = bitmaps[at[5]:at[5] + n_w]
    r6 = bitmaps[at[6]:at[6] + n_w]
    r7 = bitmaps[at[7]:at[7] + n_w]
    r8 = bitmaps[at[8]:at[8] + n_w]
    r9 = bitmaps[at[9]:at[9] + n_w]
    r10 = bitmaps[at[10]:at[10] + n_w]
    r11 = bitmaps[at[11]:at[11] + n_w]
    r12 = bitmaps[at[12]:at[12] + n_w]
    r13 = bitmaps[at[13]:at[13] + n_w]
    r14 = bitmaps[at[14]:at[14] + n_w]
    s0 = sums[0:n_w]
    s1 = sums[cw:cw + n_w]
    s2 = sums[2 * cw:2 * cw + n_w]
    s3 = sums[3 * cw:3 * cw + n_w]
    if n_in == 15:
        for w in range(n_w):
            s0[w], s1[w], s2[w], s3[w] = _csa15(r0[w], r1[w], r2[w], r3[w], r4[w], r5[w], r6[w], r7[w], r8[w],
                                                r9[w], r10[w], r11[w], r12[w], r13[w], r14[w])
        return
    # a short group repeats its last row; the mask zeroes the repeats (they are in L1: no extra memory traffic)
    m = np.zeros(15, np.uint64)
    for i in range(n_in):
        m[i] = ~np.uint64(0)
    m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    m8, m9, m10, m11, m12, m13, m14 = m[8], m[9], m[10], m[11], m[12], m[13], m[14]
    for w in range(n_w):
        s0[w], s1[w], s2[w], s3[w] = _csa15(r0[w] & m0, r1[w] & m1, r2[w] & m2, r3[w] & m3, r4[w] & m4,
                                            r5[w] & m5, r6[w] & m6, r7[w] & m7, r8[w] & m8, r9[w] & m9,
                                            r10[w] & m10, r11[w] & m11, r12[w] & m12, r13[w] & m13, r14[w] & m14)


@numba.njit(cache=True)
def _add_shifted(planes, cw, shift, n_planes, n_w, sums, carry):
    """planes += (4-bit sums) << shift, the carry rippling up from plane shift + 4."""
    p0 = planes[shift * cw:shift * cw + n_w]
    p1 = planes[(shift + 1) * cw:(shift + 1) * cw + n_w]
    p2 = planes[(shift + 2) * cw:(shift + 2) * cw + n_w]
    p3 = planes[(shift + 3) * cw:(shift + 3) * cw + n_w]
    s0 = sums[0:n_w]
    s1 = sums[cw:cw + n_w]
    s2 = sums[2 * cw:2 * cw + n_w]
    s3 = sums[3 * cw:3 * cw + n_w]
    for w in range(n_w):
        p = p0[w]
        c = p & s0[w]
        p0[w] = p ^ s0[w]
        p = p1[w]
        t = p ^ s1[w]
        p1[w] = t ^ c
        c = (p & s1[w]) | (c & t)
        p = p2[w]
        t = p ^ s2[w]
        p2[w] = t ^ c
        c = (p & s2[w]) | (c & t)
        p = p3[w]
        t = p ^ s3[w]
        p3[w] = t ^ c
        carry[w] = (p & s3[w]) | (c & t)
    ripple(planes, cw, shift + 4, n_planes, n_w, carry)


@numba.njit(cache=True)
def accumulate_levels(bitmaps, bases, level_ptr, n_w, w0, n_planes, planes, cw, carry, sums):
    """Set planes to the per-document weighted counts for words w0..w0+n_w.

    bases[level_ptr[v - 1]:level_ptr[v]] are the bitmap row starts of the dims of weight v (1..MAX_LEVEL); the
    planes are laid out as accumulate_bitmaps's (plane j of word w at planes[j cw + w]); n_planes must hold the
    largest weighted count and be >= 4 + the highest set bit of any weight; sums is scratch of 4 cw words.
    """
    for j in range(n_planes):
        planes[j * cw:j * cw + n_w] = 0
    for v in range(1, level_ptr.shape[0]):
        hi = level_ptr[v]
        for g in range(level_ptr[v - 1], hi, 15):
            _group_count(bitmaps, bases, g, min(15, hi - g), w0, n_w, sums, cw)
            for shift in range(4):
                if (v >> shift) & 1:
                    _add_shifted(planes, cw, shift, n_planes, n_w, sums, carry)
