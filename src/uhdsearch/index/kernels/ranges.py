"""The range driver: one query over one range of doc numbers, chunk by chunk, and the GIL-free task loop."""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.kernels.bitmaps import (MAX_PLANES, add_bitmaps_weighted, planes_extract,
                                             planes_max)
from uhdsearch.index.kernels.bits import popcount
from uhdsearch.index.kernels.comparator import sole_bucket_blocks
from uhdsearch.index.kernels.heap import push
from uhdsearch.index.kernels.levels import MAX_LEVEL, SCRATCH_PLANES, accumulate_levels
from uhdsearch.index.kernels.lists import add_lists, counted_as_row, first_block

CHUNK = 131072  # documents per chunk (a multiple of 64): counters stay in L2, and each bitmap row is read
# in 16 KB runs (4 KB runs, one page, left the hardware prefetcher cold: 1M docs 10.0 -> 8.8 ms per query)
SCRATCH_WORDS = SCRATCH_PLANES * CHUNK // 64
MAX_LIST_ROW_WORDS = 1 << 17  # a query's per-chunk list rows (lists.py) take at most 1 MiB per bucket (or 16 rows)


@numba.njit(cache=True)
def _order_by_level(bases, level_ptr, qdims, qvals, lo_j, hi_j, rows, words, quantized):
    """Refill `bases` (a bucket's bitmap row starts) ordered by weight level (every level 1 unless quantized),
    level_ptr (counts per level in, cumulative starts out); returns the sum of the bitmap dims' levels."""
    for v in range(1, level_ptr.shape[0]):
        level_ptr[v] += level_ptr[v - 1]
    fill = level_ptr.copy()
    total = 0
    for j in range(lo_j, hi_j):
        d = qdims[j]
        if rows[d] >= 0:
            v = np.int64(qvals[j]) if quantized else 1
            bases[fill[v - 1]] = rows[d] * words
            fill[v - 1] += 1
            total += v
    return total


@numba.njit(cache=True)
def _list_row_slots(indptr, rows, qdims, qvals, lo_j, hi_j, c_off, quantized, n_documents, first, most, slots,
                    level_ptr):
    """Give the list dims of entries lo_j..hi_j that are counted as rows (lists.counted_as_row; the `most` longest
    when more qualify, so a query's row buffer stays bounded) a slot each, from `first` on, ordered by weight level;
    level_ptr (zeros in) gets the cumulative starts per level (relative to `first`), as accumulate_levels reads
    them. Returns the next free slot."""
    entries = np.empty(hi_j - lo_j, np.int64)
    lengths = np.empty(hi_j - lo_j, np.int64)
    n = 0
    for j in range(lo_j, hi_j):
        d = qdims[j]
        if rows[d] < 0 and counted_as_row(indptr[d + 1] - indptr[d], n_documents):
            entries[n] = j
            lengths[n] = indptr[d + 1] - indptr[d]
            n += 1
    if n > most:  # the longest lists save the most postings; ties to the earlier entry
        keep = np.argsort(-lengths[:n], kind="mergesort")[:most]
        entries[:most] = np.sort(entries[:n][keep])
        n = most
    for i in range(n):
        level_ptr[np.int64(qvals[entries[i]]) if quantized else 1] += 1
    for v in range(1, level_ptr.shape[0]):
        level_ptr[v] += level_ptr[v - 1]
    fill = level_ptr.copy()
    for i in range(n):
        v = np.int64(qvals[entries[i]]) if quantized else 1
        slots[entries[i] - c_off] = first + fill[v - 1]
        fill[v - 1] += 1
    return first + n


@numba.njit(cache=True)
def search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                 qptr, qdims, qvals, bucket_weights, weighted, quantized, lo, hi, deleted, k, out_docs, out_scores,
                 scratch, scales, word_max, class_bits, class_max):
    """quantized: binary documents, the query values are integer weights 1..MAX_LEVEL (levels.py).

    scales, word_max, class_bits, class_max: per bucket, empty arrays, or kernels/lengths.py's length_scales
    arrays: a bucket's count then adds (weight x count) x scale[doc].

    scratch: SCRATCH_WORDS words for the adder (levels.py), from the caller (a fresh 1 MB array per query cost
    ~0.4 ms of page faults at 100k documents, as much as the search).
    """
    n_buckets = bucket_weights.shape[0]
    normed = scales[0].shape[0] > 0
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
    # per bucket: bitmap row starts of the query's bitmap dims; its list dims' summed weights (sizes the planes)
    bases = np.zeros(qptr[n_buckets] - c_off, np.int64)
    bases_ptr = np.zeros(n_buckets + 1, np.int64)
    list_weights = np.zeros(n_buckets, np.int64)
    n_planes = np.zeros(n_buckets, np.int64)
    # each bucket's bitmap bases ordered by weight level, level v's at bases_ptr[b] + level_ptr[b, v - 1:v + 1]
    level_ptr = np.zeros((n_buckets, MAX_LEVEL + 1), np.int64)
    # list dims counted as bitmap rows built per chunk (lists.py): entry e's row slot (or -1), each bucket's slots
    # row_ptr[b]..row_ptr[b + 1] - 1 ordered by level (row_level_ptr[b], as level_ptr)
    slots = np.full(qptr[n_buckets] - c_off, -1, np.int64)
    row_ptr = np.zeros(n_buckets + 1, np.int64)
    row_level_ptr = np.zeros((n_buckets, MAX_LEVEL + 1), np.int64)
    for b in range(n_buckets):
        rows = bitmap_rows[b]
        indptr = indptrs[b]
        at = bases_ptr[b]
        for j in range(qptr[b], qptr[b + 1]):
            d = qdims[j]
            if rows[d] >= 0:
                bases[at] = rows[d] * words
                at += 1
                level_ptr[b, np.int64(qvals[j]) if quantized else 1] += 1
                if weighted:
                    before = 0
                    bm = bitmaps[b]
                    for w in range(lo // 64):
                        before += popcount(bm[rows[d] * words + w])
                    cursor[j - c_off] = indptr[d] + before
            else:
                if indptr[d + 1] > indptr[d]:
                    list_weights[b] += np.int64(qvals[j]) if quantized else 1
                block = first_block(blocks[b], block_ptrs[b][d], block_ptrs[b][d + 1], lo)
                cursor[j - c_off] = block
                if block < block_ptrs[b][d + 1]:
                    pending[j - c_off] = np.int64(blocks[b][2 * block])
        bases_ptr[b + 1] = at
        largest = _order_by_level(bases[bases_ptr[b]:at], level_ptr[b], qdims, qvals, qptr[b], qptr[b + 1], rows,
                                  words, quantized)  # the largest count the planes must hold
        row_ptr[b + 1] = row_ptr[b] if weighted or bucket_weights[b] == 0.0 else _list_row_slots(
            indptr, rows, qdims, qvals, qptr[b], qptr[b + 1], c_off, quantized, words * 64, row_ptr[b],
            max(16, MAX_LIST_ROW_WORDS // chunk_words), slots, row_level_ptr[b])
        n = 8  # an add at shift j writes planes j..j+3 and its pending carries j+4..j+7 (levels.py)
        for v in range(MAX_LEVEL, 0, -1):
            if level_ptr[b, v] > level_ptr[b, v - 1] or row_level_ptr[b, v] > row_level_ptr[b, v - 1]:
                while (1 << (n - 7)) <= v:
                    n += 1
                break
        while (1 << n) <= largest + list_weights[b]:  # list dims count into the same planes
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
    if weighted or n_active != 1 or bucket_weights[sole] < 0.0:
        sole = -1
    if n_active == 0:  # no scoring bucket holds a query dim: no document scores above 0
        for i in range(k):
            out_docs[i] = -1
            out_scores[i] = 0.0
        return
    list_rows = np.empty(row_ptr[n_buckets] * chunk_words, np.uint64)
    row_bases = np.arange(row_ptr[n_buckets]) * chunk_words
    for c0 in range(lo, hi, chunk):
        c1 = min(c0 + chunk, hi)
        m = c1 - c0
        w0 = c0 // 64
        n_w = (m + 63) // 64
        comparator = sole >= 0 and size == k  # the heap only grows: the whole chunk goes to the comparator
        if weighted:
            total[:m] = 0.0
        for b in range(n_buckets):
            if bucket_weights[b] == 0.0 or qptr[b + 1] == qptr[b]:
                continue
            if weighted:
                values[:m] = 0.0
                add_lists(indptrs[b], bitmap_rows[b], block_ptrs[b], payload_ptrs[b], blocks[b], payloads[b],
                          weights[b], qdims, qvals, qptr[b], qptr[b + 1], cursor, position, pending, c_off, c0, c1,
                          True, False, values, planes, 0, chunk_words, 0, slots, list_rows, False)
                if bases_ptr[b + 1] > bases_ptr[b]:
                    add_bitmaps_weighted(bitmaps[b], weights[b], indptrs[b], bitmap_rows[b], qdims, qvals, qptr[b],
                                         qptr[b + 1], cursor, c_off, n_w, w0, words, values)
                weight_b = bucket_weights[b]
                for i in range(m):
                    total[i] += weight_b * values[i]
                continue
            if not (b == sole and comparator):  # the per-word path extracts counts from the planes into these
                counts[b * chunk:b * chunk + m] = 0
            q = b * chunk_words * MAX_PLANES
            r0, r1 = row_ptr[b], row_ptr[b + 1]
            if r1 > r0:  # the long list dims' postings of this chunk as bitmap rows
                list_rows[r0 * chunk_words:r1 * chunk_words] = 0
                add_lists(indptrs[b], bitmap_rows[b], block_ptrs[b], payload_ptrs[b], blocks[b], payloads[b],
                          weights[b], qdims, qvals, qptr[b], qptr[b + 1], cursor, position, pending, c_off, c0, c1,
                          False, quantized, values, planes, q, chunk_words, n_planes[b], slots, list_rows, True)
            if bases_ptr[b + 1] > bases_ptr[b]:
                accumulate_levels(bitmaps[b], bases[bases_ptr[b]:bases_ptr[b + 1]], level_ptr[b], n_w, w0,
                                  n_planes[b], planes[q:q + chunk_words * MAX_PLANES], chunk_words, carry,
                                  scratch[:SCRATCH_PLANES * chunk_words])
            else:
                planes[q:q + n_planes[b] * chunk_words] = 0
            if r1 > r0:
                accumulate_levels(list_rows, row_bases[r0:r1], row_level_ptr[b], n_w, 0, n_planes[b],
                                  planes[q:q + chunk_words * MAX_PLANES], chunk_words, carry,
                                  scratch[:SCRATCH_PLANES * chunk_words], False)
            # after the adder (which sets the planes): the other list dims' postings add into the same counters
            add_lists(indptrs[b], bitmap_rows[b], block_ptrs[b], payload_ptrs[b], blocks[b], payloads[b],
                      weights[b], qdims, qvals, qptr[b], qptr[b + 1], cursor, position, pending, c_off, c0, c1,
                      False, quantized, values, planes, q, chunk_words, n_planes[b], slots, list_rows, False)
        if weighted:
            for i in range(m):
                score = total[i]
                if score > 0.0 and (size < k or score > out_scores[0]):
                    if deleted.shape[0] and deleted[c0 + i]:
                        continue
                    size = push(out_scores, out_docs, size, k, score, c0 + i)
            continue
        for w in range(n_w):
            # a full heap (from the chunk's start, or filled inside it): the comparator takes the remaining words;
            # `carry` and `scratch` are free again and serve as its scratch
            if size == k and sole >= 0:
                size = sole_bucket_blocks(planes, sole * chunk_words * MAX_PLANES, chunk_words, n_planes[sole], w,
                                          n_w, m, bucket_weights[sole], hits, carry, deleted, c0, size, k,
                                          out_scores, out_docs, scales[sole], class_bits[sole], class_max[sole], w0,
                                          scratch)
                break
            # bound the word's best total (same summation order as the scores, so rounding cannot break it); while
            # the heap fills, words where no document scores above 0 are skipped (a query of a few rare dims at 1M
            # documents otherwise scored every document until its heap was full: 0.84 ms for 200 postings)
            bound = 0.0
            for b in range(n_buckets):
                weight_b = bucket_weights[b]
                if weight_b <= 0.0 or qptr[b + 1] == qptr[b]:
                    continue
                largest = planes_max(planes, b * chunk_words * MAX_PLANES + w, chunk_words, n_planes[b])
                if normed:  # rounding is monotone: no document of the word can exceed this
                    bound += (weight_b * np.float64(largest)) * word_max[b][w0 + w]
                else:
                    bound += weight_b * np.float64(largest)
            if bound <= (out_scores[0] if size == k else 0.0):
                continue
            for b in range(n_buckets):
                if qptr[b + 1] > qptr[b] and bucket_weights[b] != 0.0:
                    planes_extract(planes, b * chunk_words * MAX_PLANES + w, chunk_words, n_planes[b], counts,
                                   b * chunk + w * 64)
            for i in range(w * 64, min(w * 64 + 64, m)):
                score = 0.0
                for b in range(n_buckets):
                    if bucket_weights[b] != 0.0 and qptr[b + 1] > qptr[b]:
                        if normed:
                            score += (bucket_weights[b] * np.float64(counts[b * chunk + i])) * scales[b][c0 + i]
                        else:
                            score += bucket_weights[b] * np.float64(counts[b * chunk + i])
                if score > 0.0 and (size < k or score > out_scores[0]):
                    if deleted.shape[0] and deleted[c0 + i]:
                        continue
                    size = push(out_scores, out_docs, size, k, score, c0 + i)
    for i in range(size, k):
        out_docs[i] = -1
        out_scores[i] = 0.0


@numba.njit(cache=True, nogil=True)
def run_tasks(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
              qptr, qdims, qvals, bucket_weights, weighted, quantized, bounds, deleted, k, out_docs, out_scores, first,
              last, scratch, scales, word_max, class_bits, class_max):
    """Tasks first..last-1 of all (query, doc range) pairs; out_* are (n_queries, n_ranges, k) per-range heaps.

    qptr is (n_queries * n_buckets + 1,): the dims of query q in bucket b are qdims[qptr[q n_b + b]:...].
    Releases the GIL, so host threads run disjoint task ranges side by side; each thread passes its own `scratch`.
    """
    n_buckets = bucket_weights.shape[0]
    n_ranges = bounds.shape[0] - 1
    for task in range(first, last):
        q = task // n_ranges
        r = task % n_ranges
        search_range(indptrs, bitmap_rows, bitmaps, block_ptrs, payload_ptrs, blocks, payloads, weights, words,
                     qptr[q * n_buckets:(q + 1) * n_buckets + 1], qdims, qvals, bucket_weights, weighted, quantized,
                     bounds[r], bounds[r + 1], deleted, k, out_docs[q, r], out_scores[q, r], scratch, scales, word_max,
                     class_bits, class_max)
