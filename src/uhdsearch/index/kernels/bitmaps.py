"""Bit-sliced counters over bitmap dims: the carry-save adder, carry ripple, reading the planes, and the weighted
bitmap walk. levels.py fills the planes (15-input adder trees, integer weights as shifts).

Bit j of 64 documents' counts is one word of plane j; planes are stored plane by plane so that the loops vectorize
(the word-major layout with a per-word carry loop was 3.4x slower).
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.kernels.bits import trailing_zeros

MAX_PLANES = 32


@numba.njit(cache=True, inline="always")
def csa(a, b, c):
    """Carry-save adder: three words of bits in, (sum bits, carry bits) out, for 64 documents at once."""
    t = a ^ b
    return t ^ c, (a & b) | (c & t)


@numba.njit(cache=True, inline="always")
def ripple(planes, cw, j, n_planes, n_w, carry):
    """Add the carry words into planes j, j+1, ... until no carry is left (or the top plane)."""
    while j < n_planes:
        plane = planes[j * cw:j * cw + n_w]
        left = np.uint64(0)
        for w in range(n_w):
            p = plane[w]
            c = carry[w]
            plane[w] = p ^ c
            c &= p
            carry[w] = c
            left |= c
        if left == 0:
            return
        j += 1


@numba.njit(cache=True, inline="always")
def plane_add(planes, q, cw, n_planes, w, bit, step):
    """Add `step` (>= 1) to one document's vertical counter: bit `bit` of word w (plane j at planes[q + j cw]).

    List-encoded dims add their postings here, so the planes hold whole counts and the comparator needs no
    slack for them; a ripple stops at the first plane that takes the carry (two planes on average for step 1).
    """
    one = np.uint64(1) << np.uint64(bit)
    v = step
    carry = np.uint64(0)
    j = 0
    while (v or carry) and j < n_planes:
        at = q + j * cw + w
        p = planes[at]
        b = one if v & 1 else np.uint64(0)
        a = p & one
        planes[at] = p ^ b ^ carry  # b and carry are within `one`: only this document's bit changes
        carry = (a & b) | (carry & (a ^ b))
        v >>= 1
        j += 1


@numba.njit(cache=True, inline="always")
def planes_max(planes, q, cw, n_planes):
    """Largest count held by the 64 vertical counters of one word (its plane j at planes[q + j cw])."""
    candidates = ~np.uint64(0)
    largest = 0
    for j in range(n_planes - 1, -1, -1):
        t = planes[q + j * cw] & candidates
        if t:
            candidates = t
            largest |= 1 << j
    return largest


@numba.njit(cache=True, inline="always")
def planes_extract(planes, q, cw, n_planes, counts, at):
    for plane in range(n_planes):
        x = planes[q + plane * cw]
        while x:
            bit = trailing_zeros(x)
            counts[at + bit] += 1 << plane
            x &= x - np.uint64(1)


@numba.njit(cache=True)
def add_bitmaps_weighted(bitmaps, weights, indptr, rows, qdims, qvals, lo_j, hi_j, cursor, c_off, n_w, w0, words,
                         values):
    for j in range(lo_j, hi_j):
        d = qdims[j]
        if rows[d] < 0:
            continue
        base = rows[d] * words + w0
        q_value = np.float64(qvals[j])
        at = cursor[j - c_off]
        last = indptr[d + 1]  # bounds a corrupted bitmap with more bits than postings
        for w in range(n_w):
            x = bitmaps[base + w]
            while x and at < last:
                bit = trailing_zeros(x)
                values[w * 64 + bit] += q_value * np.float64(weights[at])
                at += 1
                x &= x - np.uint64(1)
        cursor[j - c_off] = at
