"""numba search kernels over compressed postings (see codec.py): exact top-k, many queries and threads.

Work unit: one query over one range of doc numbers, walked in chunks of CHUNK documents. Per chunk and bucket,
packed lists add into small counters (term at a time); bitmap dims of a binary query are counted with
bit-sliced counters (bit j of 64 documents' counts in one word, ripple-carry adds), so a bitmap word costs a
few operations for 64 documents. Scores are summed over buckets in bucket order, as the oracle sums them.
Each work unit keeps a k-heap; the host merges the heaps of the ranges of one query.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from uhdsearch.index.codec import BLOCK

CHUNK = 32768  # documents per chunk: counters and scores stay in L2; a multiple of 64
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


@numba.njit(cache=True)
def _search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                  qptr, qdims, qvals, bucket_weights, weighted, lo, hi, deleted, k, out_docs, out_scores):
    n_buckets = bucket_weights.shape[0]
    total = np.zeros(CHUNK, np.float64)
    values = np.zeros(CHUNK, np.float64)
    counts = np.zeros(CHUNK, np.int64)
    planes = np.zeros((CHUNK // 64) * MAX_PLANES, np.uint64)
    heap_scores = out_scores
    heap_docs = out_docs
    size = 0
    # per query entry: next block of a list dim, or next weight of a bitmap dim
    cursor = np.zeros(qptr[n_buckets] - qptr[0], np.int64)
    for b in range(n_buckets):
        rows = bitmap_rows[b]
        for j in range(qptr[b], qptr[b + 1]):
            d = qdims[j]
            if rows[d] >= 0:
                if weighted:
                    before = 0
                    base = rows[d] * words
                    for w in range(lo // 64):
                        before += _popcount(bitmaps[b][base + w])
                    cursor[j - qptr[0]] = indptrs[b][d] + before
            else:
                cursor[j - qptr[0]] = _first_block(blocks[b], block_ptrs[b][d], block_ptrs[b][d + 1], lo)
    for c0 in range(lo, hi, CHUNK):
        c1 = min(c0 + CHUNK, hi)
        m = c1 - c0
        w0 = c0 // 64
        n_w = (m + 63) // 64
        total[:m] = 0.0
        for b in range(n_buckets):
            weight_b = bucket_weights[b]
            if weight_b == 0.0 or qptr[b + 1] == qptr[b]:
                continue
            rows = bitmap_rows[b]
            if weighted:
                values[:m] = 0.0
            else:
                counts[:m] = 0
            n_bitmap = 0
            for j in range(qptr[b], qptr[b + 1]):
                d = qdims[j]
                if rows[d] >= 0:
                    n_bitmap += 1
                    continue
                # packed list: decode blocks that start before c1, keep the cursor on a block that straddles it
                block = cursor[j - qptr[0]]
                end_block = block_ptrs[b][d + 1]
                first_posting = indptrs[b][d] + (block - block_ptrs[b][d]) * BLOCK
                q_value = np.float64(qvals[j])
                while block < end_block:
                    doc = np.int64(blocks[b][2 * block])
                    if doc >= c1:
                        break
                    count = min(BLOCK, indptrs[b][d + 1] - first_posting)
                    meta = np.int64(blocks[b][2 * block + 1])
                    bits = meta & 31
                    start = payload_ptrs[b][d] + (meta >> 5)
                    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
                    straddles = False
                    for i in range(count):
                        if i > 0:
                            position = (i - 1) * bits
                            word = start + (position >> 5)
                            pair = np.uint64(payloads[b][word]) | (np.uint64(payloads[b][word + 1]) << np.uint64(32))
                            doc += np.int64((pair >> np.uint64(position & 31)) & mask) + 1
                        if doc >= c1:
                            straddles = True
                            break
                        if doc >= c0:
                            if weighted:
                                values[doc - c0] += q_value * np.float64(weights[b][first_posting + i])
                            else:
                                counts[doc - c0] += 1
                    if straddles:
                        break
                    block += 1
                    first_posting += count
                cursor[j - qptr[0]] = block
            if n_bitmap:
                if weighted:
                    for j in range(qptr[b], qptr[b + 1]):
                        d = qdims[j]
                        if rows[d] < 0:
                            continue
                        base = rows[d] * words + w0
                        q_value = np.float64(qvals[j])
                        at = cursor[j - qptr[0]]
                        last = indptrs[b][d + 1]  # bounds a corrupted bitmap with more bits than postings
                        for w in range(n_w):
                            x = bitmaps[b][base + w]
                            while x and at < last:
                                bit = _trailing_zeros(x)
                                values[w * 64 + bit] += q_value * np.float64(weights[b][at])
                                at += 1
                                x &= x - np.uint64(1)
                        cursor[j - qptr[0]] = at
                else:
                    n_planes = 1
                    while (1 << n_planes) <= n_bitmap:
                        n_planes += 1
                    planes[:n_w * MAX_PLANES] = 0
                    for j in range(qptr[b], qptr[b + 1]):
                        d = qdims[j]
                        if rows[d] < 0:
                            continue
                        base = rows[d] * words + w0
                        for w in range(n_w):
                            x = bitmaps[b][base + w]
                            p = w * MAX_PLANES
                            while x:  # ripple-carry add of one bit per document
                                carry = planes[p] & x
                                planes[p] ^= x
                                x = carry
                                p += 1
                    for w in range(n_w):
                        for plane in range(n_planes):
                            x = planes[w * MAX_PLANES + plane]
                            while x:
                                bit = _trailing_zeros(x)
                                counts[w * 64 + bit] += 1 << plane
                                x &= x - np.uint64(1)
            if weighted:
                for i in range(m):
                    total[i] += weight_b * values[i]
            else:
                for i in range(m):
                    total[i] += weight_b * np.float64(counts[i])
        for i in range(m):
            score = total[i]
            if score > 0.0 and (size < k or score > heap_scores[0]):
                if deleted.shape[0] and deleted[c0 + i]:
                    continue
                size = _push(heap_scores, heap_docs, size, k, score, c0 + i)
    for i in range(size, k):
        heap_docs[i] = -1
        heap_scores[i] = 0.0


@numba.njit(cache=True, parallel=True)
def search_batch(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                 qptr, qdims, qvals, bucket_weights, weighted, bounds, deleted, k, out_docs, out_scores):
    """Every (query, doc range) pair in parallel; out_* are (n_queries, n_ranges, k) per-range heaps.

    qptr is (n_queries * n_buckets + 1,): the dims of query q in bucket b are qdims[qptr[q n_b + b]:...].
    """
    n_buckets = bucket_weights.shape[0]
    n_queries = out_docs.shape[0]
    n_ranges = bounds.shape[0] - 1
    for task in prange(n_queries * n_ranges):
        q = task // n_ranges
        r = task % n_ranges
        _search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                      qptr[q * n_buckets:(q + 1) * n_buckets + 1], qdims, qvals, bucket_weights, weighted,
                      bounds[r], bounds[r + 1], deleted, k, out_docs[q, r], out_scores[q, r])


# ---------------------------------------------------------------- host side
def query_arrays(queries, n_buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interleave per-bucket CSR rows into (qptr, qdims int64, qvals float32) ordered by (query, bucket)."""
    lengths = np.stack([np.diff(m.indptr) for m in queries.buckets], axis=1).astype(np.int64)  # (n_q, n_b)
    qptr = np.concatenate(([0], np.cumsum(lengths.ravel()))).astype(np.int64)
    starts = qptr[:-1].reshape(-1, n_buckets)
    qdims = np.empty(int(qptr[-1]), np.int64)
    qvals = np.empty(int(qptr[-1]), np.float32)
    for b, m in enumerate(queries.buckets):
        where = np.repeat(starts[:, b] - m.indptr[:-1], lengths[:, b]) + np.arange(m.nnz)
        qdims[where] = m.indices
        qvals[where] = m.data
    return qptr, qdims, qvals


def range_bounds(n_documents: int, n_ranges: int) -> np.ndarray:
    """(n_ranges + 1,) int64 split points, multiples of 64 so that no bitmap word is shared."""
    words = (n_documents + 63) // 64
    cuts = [min(n_documents, (words * r // n_ranges) * 64) for r in range(n_ranges)]
    return np.array(cuts + [n_documents], np.int64)


def merge_heaps(docs: np.ndarray, scores: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(n_q, n_ranges, k) heaps -> (n_q, depth) sorted by score desc, doc asc; padding -1 / 0 last."""
    n_q = docs.shape[0]
    docs = docs.reshape(n_q, -1)
    scores = scores.reshape(n_q, -1)
    key = np.where(docs >= 0, -scores, np.inf)
    order = np.lexsort((np.where(docs >= 0, docs, np.iinfo(np.int64).max), key), axis=-1)[:, :depth]
    return np.take_along_axis(docs, order, 1), np.take_along_axis(scores, order, 1)


def search(buckets, n_documents: int, queries, k: int, bucket_weights, weighted: bool,
           deleted: np.ndarray | None, n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of every query row over compressed `buckets`; see InvertedIndex.search_encoded."""
    depth = min(k, n_documents)
    n_q = queries.n
    if n_q == 0 or depth == 0:
        return np.full((n_q, depth), -1, np.int64), np.zeros((n_q, depth))
    n_buckets = len(buckets)
    qptr, qdims, qvals = query_arrays(queries, n_buckets)
    # one query: split the documents between threads; many: one query per task
    n_ranges = n_threads if n_q < n_threads else 1
    n_ranges = max(1, min(n_ranges, (n_documents + 63) // 64))
    bounds = range_bounds(n_documents, n_ranges)
    out_docs = np.empty((n_q, n_ranges, depth), np.int64)
    out_scores = np.empty((n_q, n_ranges, depth), np.float64)
    empty_weights = np.zeros(0, np.float32)
    args = (
        tuple(p.indptr for p in buckets), tuple(p.bitmap_rows for p in buckets), tuple(p.bitmaps for p in buckets),
        tuple(p.block_ptr for p in buckets), tuple(p.payload_ptr for p in buckets), tuple(p.blocks for p in buckets),
        tuple(p.payload for p in buckets),
        tuple(p.weights if (weighted and p.weights is not None) else empty_weights for p in buckets),
    )
    mask = np.zeros(0, np.bool_) if deleted is None else np.ascontiguousarray(deleted, np.bool_)
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(n_threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        search_batch(*args, (n_documents + 63) // 64, qptr, qdims, qvals,
                     np.asarray(bucket_weights, np.float64), weighted, bounds, mask, depth, out_docs, out_scores)
    finally:
        numba.set_num_threads(previous)
    return merge_heaps(out_docs, out_scores, depth)


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
