"""numba search kernels over compressed postings (see codec.py): exact top-k, many queries and threads.

Work unit: one query over one range of doc numbers, walked in chunks of CHUNK documents. Per chunk and bucket,
packed lists add into small counters (term at a time); bitmap dims of a binary query are counted with
bit-sliced counters (bit j of 64 documents' counts in one word, fed by 15-input carry-save adders, stored plane
by plane so that the loops vectorize), so a bitmap word costs about one SIMD lane-operation per 64 documents and
the scan runs at memory bandwidth. Only documents that can still enter the top k are unpacked: a vectorized
comparator finds them when one bucket scores the query, a per-word bound otherwise. Scores are summed over
buckets in bucket order, as the oracle sums them. Each work unit keeps a k-heap; dispatch.py runs work units on
threads and merges the heaps of one query's ranges.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from uhdsearch.index.codec import BLOCK

CHUNK = 131072  # documents per chunk (a multiple of 64): counters stay in L2, and each bitmap row is read
# in 16 KB runs (4 KB runs, one page, left the hardware prefetcher cold: 1M docs 10.0 -> 8.8 ms per query)
MAX_PLANES = 32


@intrinsic
def _popcount(typingctx, x):
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return x(x), codegen


@intrinsic
def _trailing_zeros(typingctx, x):
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return x(x), codegen


# ---------------------------------------------------------------- heap: root is the worst kept hit
@numba.njit(cache=True, inline="always")
def _worse(score_a, doc_a, score_b, doc_b):
    return score_a < score_b or (score_a == score_b and doc_a > doc_b)


@numba.njit(cache=True)
def _sift_down(scores, docs, size, i):
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and _worse(scores[right], docs[right], scores[left], docs[left]):
            child = right
        if _worse(scores[child], docs[child], scores[i], docs[i]):
            scores[i], scores[child] = scores[child], scores[i]
            docs[i], docs[child] = docs[child], docs[i]
            i = child
        else:
            return


@numba.njit(cache=True)
def _push(scores, docs, size, k, score, doc):
    """Offer a hit; docs arrive in ascending order, so an equal score never displaces a kept hit."""
    if size < k:
        i = size
        scores[i] = score
        docs[i] = doc
        while i > 0:
            parent = (i - 1) // 2
            if _worse(scores[i], docs[i], scores[parent], docs[parent]):
                scores[i], scores[parent] = scores[parent], scores[i]
                docs[i], docs[parent] = docs[parent], docs[i]
                i = parent
            else:
                break
        return size + 1
    if score > scores[0]:
        scores[0] = score
        docs[0] = doc
        _sift_down(scores, docs, size, 0)
    return size


# ---------------------------------------------------------------- one query, one doc range
@numba.njit(cache=True)
def _first_block(blocks, start, end, doc):
    """Last block in [start, end) whose first doc is <= doc (or `start`)."""
    lo, hi = start, end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if np.int64(blocks[2 * mid]) <= doc:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def _csa(a, b, c):
    """Carry-save adder: three words of bits in, (sum bits, carry bits) out, for 64 documents at once."""
    t = a ^ b
    return t ^ c, (a & b) | (c & t)


@numba.njit(cache=True, inline="always")
def _ripple(planes, cw, j, n_planes, n_w, carry):
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


@numba.njit(cache=True)
def _accumulate_bitmaps(bitmaps, bases, n_w, w0, n_planes, planes, cw, carry):
    """Set planes to the per-document counts of the bitmaps whose rows start at `bases`, for words w0..w0+n_w.

    Bit-sliced: plane j holds bit j of 64 documents' counts; word w's plane j is planes[j cw + w]. Plane-major,
    so that every loop below walks contiguous words and compiles to SIMD (the word-major layout with a per-word
    carry loop was 3.4x slower). Groups of 15 bitmap rows reduce to a 4-bit count per document with 11
    carry-save adders, added into planes 0-3; the carry out of plane 3 ripples up one plane per pass.
    """
    for j in range(n_planes):
        planes[j * cw:j * cw + n_w] = 0
    p0 = planes[0:n_w]
    p1 = planes[cw:cw + n_w]
    p2 = planes[2 * cw:2 * cw + n_w]
    p3 = planes[3 * cw:3 * cw + n_w]
    n_full = bases.shape[0] // 15 * 15
    for g in range(0, n_full, 15):
        # slices, not base + w: the index is then provably in range, which lets LLVM vectorize the loop
        r0 = bitmaps[bases[g] + w0:bases[g] + w0 + n_w]
        r1 = bitmaps[bases[g + 1] + w0:bases[g + 1] + w0 + n_w]
        r2 = bitmaps[bases[g + 2] + w0:bases[g + 2] + w0 + n_w]
        r3 = bitmaps[bases[g + 3] + w0:bases[g + 3] + w0 + n_w]
        r4 = bitmaps[bases[g + 4] + w0:bases[g + 4] + w0 + n_w]
        r5 = bitmaps[bases[g + 5] + w0:bases[g + 5] + w0 + n_w]
        r6 = bitmaps[bases[g + 6] + w0:bases[g + 6] + w0 + n_w]
        r7 = bitmaps[bases[g + 7] + w0:bases[g + 7] + w0 + n_w]
        r8 = bitmaps[bases[g + 8] + w0:bases[g + 8] + w0 + n_w]
        r9 = bitmaps[bases[g + 9] + w0:bases[g + 9] + w0 + n_w]
        r10 = bitmaps[bases[g + 10] + w0:bases[g + 10] + w0 + n_w]
        r11 = bitmaps[bases[g + 11] + w0:bases[g + 11] + w0 + n_w]
        r12 = bitmaps[bases[g + 12] + w0:bases[g + 12] + w0 + n_w]
        r13 = bitmaps[bases[g + 13] + w0:bases[g + 13] + w0 + n_w]
        r14 = bitmaps[bases[g + 14] + w0:bases[g + 14] + w0 + n_w]
        for w in range(n_w):
            a1, c1 = _csa(r0[w], r1[w], r2[w])
            a2, c2 = _csa(r3[w], r4[w], r5[w])
            a3, c3 = _csa(r6[w], r7[w], r8[w])
            a4, c4 = _csa(r9[w], r10[w], r11[w])
            a5, c5 = _csa(r12[w], r13[w], r14[w])
            e1, d1 = _csa(a1, a2, a3)
            s0, d2 = _csa(a4, a5, e1)
            f1, g1 = _csa(c1, c2, c3)
            f2, g2 = _csa(c4, c5, d1)
            s1, g3 = _csa(f1, f2, d2)
            s2, s3 = _csa(g1, g2, g3)
            # add the 4-bit number (s3 s2 s1 s0) into planes 0-3
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
            carry[w] = (p & s3) | (c & t)
        _ripple(planes, cw, 4, n_planes, n_w, carry)
    for g in range(n_full, bases.shape[0]):
        carry[:n_w] = bitmaps[bases[g] + w0:bases[g] + w0 + n_w]
        _ripple(planes, cw, 0, n_planes, n_w, carry)


@numba.njit(cache=True, inline="always")
def _planes_max(planes, q, cw, n_planes):
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
def _planes_extract(planes, q, cw, n_planes, counts, at):
    for plane in range(n_planes):
        x = planes[q + plane * cw]
        while x:
            bit = _trailing_zeros(x)
            counts[at + bit] += 1 << plane
            x &= x - np.uint64(1)


@numba.njit(cache=True)
def _at_least(planes, q, cw, n_planes, n_w, need, hits, equal):
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
def _add_bitmaps_weighted(bitmaps, weights, indptr, rows, qdims, qvals, lo_j, hi_j, cursor, c_off, n_w, w0, words,
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
                bit = _trailing_zeros(x)
                values[w * 64 + bit] += q_value * np.float64(weights[at])
                at += 1
                x &= x - np.uint64(1)
        cursor[j - c_off] = at


@numba.njit(cache=True)
def _add_lists(indptr, rows, block_ptr, payload_ptr, blocks, payload, weights, qdims, qvals, lo_j, hi_j, cursor,
               position, pending, c_off, c0, c1, weighted, counts, values):
    """Term at a time over packed lists for documents c0..c1-1.

    Each query entry keeps its decoding state between chunks: block, position in the block and the decoded
    doc number not yet counted, so no block is decoded twice.
    """
    for j in range(lo_j, hi_j):
        d = qdims[j]
        if rows[d] >= 0:
            continue
        e = j - c_off
        block = cursor[e]
        end_block = block_ptr[d + 1]
        if block >= end_block:
            continue
        doc = pending[e]
        if doc >= c1:
            continue
        i = position[e]
        q_value = np.float64(qvals[j])
        first_posting = indptr[d] + (block - block_ptr[d]) * BLOCK
        count = min(BLOCK, indptr[d + 1] - first_posting)
        meta = np.int64(blocks[2 * block + 1])
        bits = meta & 31
        start = payload_ptr[d] + (meta >> 5)
        mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
        while True:
            if doc >= c0:
                if weighted:
                    values[doc - c0] += q_value * np.float64(weights[first_posting + i])
                else:
                    counts[doc - c0] += 1
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


@numba.njit(cache=True)
def _sole_bucket_hits(planes, q, cw, n_planes, n_w, m, n_lists, weight, list_counts, hits, equal, deleted, c0,
                      size, k, out_scores, out_docs):
    """Offer the chunk's documents that can beat the full heap, scored by one bucket; returns the heap size."""
    need = 0  # smallest bitmap count whose best total (every list dim too) beats the heap's worst
    while need < (1 << n_planes) and weight * np.float64(n_lists + need) <= out_scores[0]:
        need += 1
    if need == 1 << n_planes:
        return size
    _at_least(planes, q, cw, n_planes, n_w, need, hits, equal)
    for w in range(n_w):
        x = hits[w]
        while x:
            bit = _trailing_zeros(x)
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
                size = _push(out_scores, out_docs, size, k, score, c0 + i)
    return size


@numba.njit(cache=True)
def _search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                  qptr, qdims, qvals, bucket_weights, weighted, lo, hi, deleted, k, out_docs, out_scores):
    n_buckets = bucket_weights.shape[0]
    chunk = max(64, min(CHUNK, (hi - lo + 63) // 64 * 64))  # small indexes need no full-size scratch
    chunk_words = chunk // 64
    total = np.zeros(chunk if weighted else 0, np.float64)
    values = np.zeros(chunk if weighted else 0, np.float64)
    counts = np.zeros(n_buckets * chunk, np.int32)
    planes = np.zeros(n_buckets * chunk_words * MAX_PLANES, np.uint64)
    carry = np.zeros(chunk_words, np.uint64)
    hits = np.zeros(chunk_words, np.uint64)
    size = 0
    c_off = qptr[0]
    # per query entry: next block of a list dim, or next weight of a bitmap dim
    cursor = np.zeros(qptr[n_buckets] - c_off, np.int64)
    position = np.zeros(qptr[n_buckets] - c_off, np.int64)  # list dims: posting within the block
    pending = np.zeros(qptr[n_buckets] - c_off, np.int64)  # list dims: decoded doc number not yet counted
    # per bucket: bitmap row starts of the query's bitmap dims; count of its list dims (bounds their counts)
    bases = np.zeros(qptr[n_buckets] - c_off, np.int64)
    bases_ptr = np.zeros(n_buckets + 1, np.int64)
    n_lists = np.zeros(n_buckets, np.int64)
    n_planes = np.zeros(n_buckets, np.int64)
    for b in range(n_buckets):
        rows = bitmap_rows[b]
        indptr = indptrs[b]
        at = bases_ptr[b]
        for j in range(qptr[b], qptr[b + 1]):
            d = qdims[j]
            if rows[d] >= 0:
                bases[at] = rows[d] * words
                at += 1
                if weighted:
                    before = 0
                    bm = bitmaps[b]
                    for w in range(lo // 64):
                        before += _popcount(bm[rows[d] * words + w])
                    cursor[j - c_off] = indptr[d] + before
            else:
                if indptr[d + 1] > indptr[d]:
                    n_lists[b] += 1
                block = _first_block(blocks[b], block_ptrs[b][d], block_ptrs[b][d + 1], lo)
                cursor[j - c_off] = block
                if block < block_ptrs[b][d + 1]:
                    pending[j - c_off] = np.int64(blocks[b][2 * block])
        bases_ptr[b + 1] = at
        n = 5  # the 15-input adder writes 4 planes and may carry into a 5th
        while (1 << n) <= at - bases_ptr[b]:
            n += 1
        n_planes[b] = n
    # the one bucket that scores a binary query, when there is one (the usual single-bucket model): its
    # candidates come from a vectorized comparator instead of a per-word bound
    sole = -1
    n_active = 0
    for b in range(n_buckets):
        if bucket_weights[b] != 0.0 and qptr[b + 1] > qptr[b]:
            n_active += 1
            sole = b
    if weighted or n_active != 1 or bucket_weights[sole] < 0.0 or bases_ptr[sole + 1] == bases_ptr[sole]:
        sole = -1
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        m = c1 - c0
        w0 = c0 // 64
        n_w = (m + 63) // 64
        comparator = sole >= 0 and size == k  # the heap only grows: decided once per chunk, used twice below
        if weighted:
            total[:m] = 0.0
        for b in range(n_buckets):
            if bucket_weights[b] == 0.0 or qptr[b + 1] == qptr[b]:
                continue
            if weighted:
                values[:m] = 0.0
            elif not (b == sole and comparator and n_lists[b] == 0):  # that path reads no counts then
                counts[b * chunk:b * chunk + m] = 0
            _add_lists(indptrs[b], bitmap_rows[b], block_ptrs[b], payload_ptrs[b], blocks[b], payloads[b],
                       weights[b], qdims, qvals, qptr[b], qptr[b + 1], cursor, position, pending, c_off, c0, c1,
                       weighted,
                       counts[b * chunk:(b + 1) * chunk], values)
            if weighted:
                if bases_ptr[b + 1] > bases_ptr[b]:
                    _add_bitmaps_weighted(bitmaps[b], weights[b], indptrs[b], bitmap_rows[b], qdims, qvals, qptr[b],
                                          qptr[b + 1], cursor, c_off, n_w, w0, words, values)
                weight_b = bucket_weights[b]
                for i in range(m):
                    total[i] += weight_b * values[i]
            elif bases_ptr[b + 1] > bases_ptr[b]:
                _accumulate_bitmaps(bitmaps[b], bases[bases_ptr[b]:bases_ptr[b + 1]], n_w, w0, n_planes[b],
                                    planes[b * chunk_words * MAX_PLANES:(b + 1) * chunk_words * MAX_PLANES],
                                    chunk_words, carry)
        if weighted:
            for i in range(m):
                score = total[i]
                if score > 0.0 and (size < k or score > out_scores[0]):
                    if deleted.shape[0] and deleted[c0 + i]:
                        continue
                    size = _push(out_scores, out_docs, size, k, score, c0 + i)
            continue
        if comparator:  # `carry` is free again: it serves as the comparator's scratch
            size = _sole_bucket_hits(planes, sole * chunk_words * MAX_PLANES, chunk_words, n_planes[sole], n_w, m,
                                     n_lists[sole], bucket_weights[sole], counts[sole * chunk:(sole + 1) * chunk],
                                     hits, carry, deleted, c0, size, k, out_scores, out_docs)
            continue
        for w in range(n_w):
            if size == k:
                # bound the word's best total (same summation order as the scores, so rounding cannot break it)
                bound = 0.0
                for b in range(n_buckets):
                    weight_b = bucket_weights[b]
                    if weight_b <= 0.0 or qptr[b + 1] == qptr[b]:
                        continue
                    largest = n_lists[b]
                    if bases_ptr[b + 1] > bases_ptr[b]:
                        largest += _planes_max(planes, b * chunk_words * MAX_PLANES + w, chunk_words, n_planes[b])
                    bound += weight_b * np.float64(largest)
                if bound <= out_scores[0]:
                    continue
            for b in range(n_buckets):
                if bases_ptr[b + 1] > bases_ptr[b] and bucket_weights[b] != 0.0:
                    _planes_extract(planes, b * chunk_words * MAX_PLANES + w, chunk_words, n_planes[b], counts,
                                    b * chunk + w * 64)
            for i in range(w * 64, min(w * 64 + 64, m)):
                score = 0.0
                for b in range(n_buckets):
                    if bucket_weights[b] != 0.0 and qptr[b + 1] > qptr[b]:
                        score += bucket_weights[b] * np.float64(counts[b * chunk + i])
                if score > 0.0 and (size < k or score > out_scores[0]):
                    if deleted.shape[0] and deleted[c0 + i]:
                        continue
                    size = _push(out_scores, out_docs, size, k, score, c0 + i)
    for i in range(size, k):
        out_docs[i] = -1
        out_scores[i] = 0.0


@numba.njit(cache=True, nogil=True)
def run_tasks(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
              qptr, qdims, qvals, bucket_weights, weighted, bounds, deleted, k, out_docs, out_scores, first, last):
    """Tasks first..last-1 of all (query, doc range) pairs; out_* are (n_queries, n_ranges, k) per-range heaps.

    qptr is (n_queries * n_buckets + 1,): the dims of query q in bucket b are qdims[qptr[q n_b + b]:...].
    Releases the GIL, so host threads run disjoint task ranges side by side.
    """
    n_buckets = bucket_weights.shape[0]
    n_ranges = bounds.shape[0] - 1
    for task in range(first, last):
        q = task // n_ranges
        r = task % n_ranges
        _search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                      qptr[q * n_buckets:(q + 1) * n_buckets + 1], qdims, qvals, bucket_weights, weighted,
                      bounds[r], bounds[r + 1], deleted, k, out_docs[q, r], out_scores[q, r])


@numba.njit(cache=True)
def sort_heaps(docs, scores, depth):
    """Rows of (doc, score) heap entries -> the best `depth` by score desc, doc asc; padding (doc -1) last.

    numba rather than np.lexsort: a single query's five numpy calls took ~35 us, a tenth of a 10k search.
    """
    n_q, width = docs.shape
    out_docs = np.full((n_q, depth), -1, np.int64)
    out_scores = np.zeros((n_q, depth), np.float64)
    key = np.empty(width, np.float64)
    for q in range(n_q):
        by_doc = np.argsort(docs[q])  # ascending doc first, then a stable sort by score keeps that order on ties
        for i in range(width):
            d = docs[q, by_doc[i]]
            key[i] = -scores[q, by_doc[i]] if d >= 0 else np.inf
        order = np.argsort(key[:width], kind="mergesort")
        for i in range(min(depth, width)):
            j = by_doc[order[i]]
            if docs[q, j] < 0:
                break
            out_docs[q, i] = docs[q, j]
            out_scores[q, i] = scores[q, j]
    return out_docs, out_scores


@numba.njit(cache=True)
def blocks_are_valid(indptr, block_ptr, payload_ptr, blocks, n_documents):
    """Cheap load-time check: every block's first doc is in range and its packed bits lie in its dim's payload."""
    for d in range(indptr.shape[0] - 1):
        remaining = indptr[d + 1] - indptr[d]
        size = payload_ptr[d + 1] - payload_ptr[d]
        for block in range(block_ptr[d], block_ptr[d + 1]):
            count = min(BLOCK, remaining)
            remaining -= count
            meta = np.int64(blocks[2 * block + 1])
            if np.int64(blocks[2 * block]) >= n_documents:
                return False
            if (meta >> 5) + ((meta & 31) * (count - 1) + 31) // 32 > size:
                return False
    return True
