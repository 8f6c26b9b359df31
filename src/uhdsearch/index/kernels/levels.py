"""The bit-sliced adder: bitmap rows into one counter, each row with an integer weight (1 for binary queries).

Binary scoring gives every row weight 1; quantized scoring (integer query weights over binary documents, e.g. 4-bit
IDF) gives a dim of weight v = sum_j 2^j b_j its bitmap shifted to plane j for every set bit j. Each bitmap row is
read once: rows of equal weight go through a 15-input carry-save tree together (11 adders per word), and its 4-bit
count is added at every set bit of the weight (popcount(v) cheap adds into cached planes per 15 rows). The counter
then holds the weighted sum, so the one-bucket comparator and per-word bound prune as for binary. List-encoded dims
simply add their weight to the per-document counters (lists.py): no planes needed.
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
def _masks(n_in):
    m = np.zeros(15, np.uint64)
    for i in range(n_in):
        m[i] = ~np.uint64(0)
    return m


@numba.njit(cache=True)
def _flush(planes, cw, j, n_planes, n_w, pending, count, carry):
    """Add the `count` carry words pending at shift j (each of weight 2^(j+4)) into planes j+4..: one 15-input
    tree and one 4-bit add, then the ripple up (once per 15 adds, not once per add)."""
    at = np.empty(15, np.int64)
    for i in range(15):
        at[i] = (j * 15 + min(i, count - 1)) * cw
    x0, x1, x2, x3, x4 = (pending[at[0]:at[0] + n_w], pending[at[1]:at[1] + n_w], pending[at[2]:at[2] + n_w],
                          pending[at[3]:at[3] + n_w], pending[at[4]:at[4] + n_w])
    x5, x6, x7, x8, x9 = (pending[at[5]:at[5] + n_w], pending[at[6]:at[6] + n_w], pending[at[7]:at[7] + n_w],
                          pending[at[8]:at[8] + n_w], pending[at[9]:at[9] + n_w])
    x10, x11, x12, x13, x14 = (pending[at[10]:at[10] + n_w], pending[at[11]:at[11] + n_w],
                               pending[at[12]:at[12] + n_w], pending[at[13]:at[13] + n_w],
                               pending[at[14]:at[14] + n_w])
    m = _masks(count)
    m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    m8, m9, m10, m11, m12, m13, m14 = m[8], m[9], m[10], m[11], m[12], m[13], m[14]
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
def _add_group(bitmaps, bases, g, n_in, w0, n_w, v, planes, cw, n_planes, sums, pending, n_pending, carry):
    """planes += v x (the count of rows bases[g:g+n_in], 1 <= n_in <= 15), words w0..w0+n_w.

    The 15-input tree's 4-bit count is added at v's lowest set bit in the same pass (as the binary adder does);
    when v has more set bits it is kept in `sums` (4 cw words) and added at each of them from there. The carry
    out of each add waits in `pending` (_flush).
    """
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
    # a short group repeats its last row; the masks zero the repeats (they are in L1: no extra memory traffic)
    m = _masks(n_in)
    m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
    m8, m9, m10, m11, m12, m13, m14 = m[8], m[9], m[10], m[11], m[12], m[13], m[14]
    shift = 0
    while not (v >> shift) & 1:
        shift += 1
    rest = v >> (shift + 1)  # the set bits still to add after this pass
    p0, p1, p2, p3 = _planes4(planes, shift, cw, n_w)
    q0, q1, q2, q3 = _planes4(sums, 0, cw, n_w)
    out = _carry_slot(planes, cw, shift, n_planes, n_w, pending, n_pending, carry)
    if n_in == 15 and not rest:  # the common case at the loop speed of the binary adder
        for w in range(n_w):
            s0, s1, s2, s3 = _csa15(r0[w], r1[w], r2[w], r3[w], r4[w], r5[w], r6[w], r7[w], r8[w], r9[w],
                                    r10[w], r11[w], r12[w], r13[w], r14[w])
            out[w] = _add4(p0, p1, p2, p3, w, s0, s1, s2, s3)
    else:
        for w in range(n_w):
            s0, s1, s2, s3 = _csa15(r0[w] & m0, r1[w] & m1, r2[w] & m2, r3[w] & m3, r4[w] & m4, r5[w] & m5,
                                    r6[w] & m6, r7[w] & m7, r8[w] & m8, r9[w] & m9, r10[w] & m10, r11[w] & m11,
                                    r12[w] & m12, r13[w] & m13, r14[w] & m14)
            q0[w], q1[w], q2[w], q3[w] = s0, s1, s2, s3
            out[w] = _add4(p0, p1, p2, p3, w, s0, s1, s2, s3)
    shift += 1
    while rest:
        if rest & 1:
            p0, p1, p2, p3 = _planes4(planes, shift, cw, n_w)
            out = _carry_slot(planes, cw, shift, n_planes, n_w, pending, n_pending, carry)
            for w in range(n_w):
                out[w] = _add4(p0, p1, p2, p3, w, q0[w], q1[w], q2[w], q3[w])
        rest >>= 1
        shift += 1


@numba.njit(cache=True)
def accumulate_levels(bitmaps, bases, level_ptr, n_w, w0, n_planes, planes, cw, carry, sums, pending):
    """Set planes to the per-document weighted counts for words w0..w0+n_w.

    bases[level_ptr[v - 1]:level_ptr[v]] are the bitmap row starts of the dims of weight v (1..MAX_LEVEL); plane
    j of word w is planes[j cw + w]. n_planes must hold the largest weighted count and be >= 8 + the highest set
    bit of any weight (an add at shift j writes planes j..j+3, its pending carries j+4..j+7). Scratch: carry
    (cw words), sums (4 cw), pending (60 cw: 15 carry words for each of the 4 shifts).
    """
    for j in range(n_planes):
        planes[j * cw:j * cw + n_w] = 0
    n_pending = np.zeros(4, np.int64)
    for v in range(1, level_ptr.shape[0]):
        hi = level_ptr[v]
        for g in range(level_ptr[v - 1], hi, 15):
            _add_group(bitmaps, bases, g, min(15, hi - g), w0, n_w, v, planes, cw, n_planes, sums, pending,
                       n_pending, carry)
    for j in range(4):
        if n_pending[j]:
            _flush(planes, cw, j, n_planes, n_w, pending, n_pending[j], carry)
