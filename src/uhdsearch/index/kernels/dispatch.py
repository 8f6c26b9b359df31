"""Host side of the search kernels (ranges.py): query arrays, doc-range splits, threads, the merge of heaps."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from uhdsearch.index.kernels.heap import merge_heaps
from uhdsearch.index.kernels.ranges import SCRATCH_WORDS, run_tasks

MIN_DOCUMENTS_PER_THREAD = 32_768


def query_arrays(queries, n_buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interleave per-bucket CSR rows into (qptr, qdims int64, qvals float32) ordered by (query, bucket)."""
    if n_buckets == 1:  # already in that order (SparseEncoding's CSR starts at 0); interleaving costs ~30 us
        m = queries.buckets[0]
        return np.asarray(m.indptr, np.int64), np.asarray(m.indices, np.int64), np.asarray(m.data, np.float32)
    return interleave_buckets(queries, n_buckets)


def interleave_buckets(queries, n_buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def ranges_per_query(n_queries: int, n_threads: int, n_documents: int) -> int:
    """Document ranges each query is split into: one per thread for fewer queries than threads, if each range
    gets MIN_DOCUMENTS_PER_THREAD (at 10k documents 2 threads took 0.39 ms against 0.29 ms on one); many
    queries run one query per task instead."""
    n_ranges = n_threads if n_queries < n_threads else 1
    return max(1, min(n_ranges, n_documents // MIN_DOCUMENTS_PER_THREAD, (n_documents + 63) // 64))


_POOL: ThreadPoolExecutor | None = None
_LOCAL = threading.local()


def _run_tasks(*args) -> None:
    """run_tasks with this thread's scratch, allocated once per thread (concurrent searches never share one).

    args: run_tasks's, up to `last`, then its four length-normalization tuples."""
    scratch = getattr(_LOCAL, "scratch", None)
    if scratch is None:
        scratch = _LOCAL.scratch = np.empty(SCRATCH_WORDS, np.uint64)
    run_tasks(*args[:-4], scratch, *args[-4:])


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="uhdsearch")
    return _POOL


def _forget_pool() -> None:
    # A forked child inherits the pool but not its threads: its tasks would wait forever.
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def search(buckets, n_documents: int, queries, k: int, bucket_weights, weighted: bool,
           deleted: np.ndarray | None, n_threads: int, quantized: bool = False,
           scales=None, bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of every query row over compressed `buckets`; see InvertedIndex.search_encoded.

    quantized: the query values are integer weights 1..15 over binary documents (levels.py).
    scales: None, or per bucket the arrays of kernels/lengths.py's length_scales: length-normalized counts.
    bounds: None (every document, split for the threads), or [lo, hi]: only documents lo..hi-1 (lo a multiple of 64).
    """
    depth = min(k, n_documents)
    n_q = queries.n
    if n_q == 0 or depth == 0:
        return np.full((n_q, depth), -1, np.int64), np.zeros((n_q, depth))
    return search_arrays(buckets, n_documents, n_q, query_arrays(queries, len(buckets)), k, bucket_weights,
                         weighted, deleted, n_threads, quantized, scales, bounds)


def search_arrays(buckets, n_documents: int, n_q: int, arrays, k: int, bucket_weights, weighted: bool,
                  deleted: np.ndarray | None, n_threads: int, quantized: bool = False,
                  scales=None, bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`search` over query arrays (qptr, qdims, qvals) already ordered by (query, bucket)."""
    depth = min(k, n_documents)
    if n_q == 0 or depth == 0:
        return np.full((n_q, depth), -1, np.int64), np.zeros((n_q, depth))
    qptr, qdims, qvals = arrays
    if bounds is None:
        bounds = range_bounds(n_documents, ranges_per_query(n_q, n_threads, n_documents))
    bounds = np.asarray(bounds, np.int64)
    n_ranges = len(bounds) - 1
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
    if scales is None:
        scales = [(np.zeros(0), np.zeros(0), np.zeros(0, np.uint64), np.zeros(0))] * len(buckets)
    factors = tuple(tuple(np.ascontiguousarray(s[i], dtype) for s in scales)
                    for i, dtype in enumerate((np.float64, np.float64, np.uint64, np.float64)))
    common = (*args, (n_documents + 63) // 64, qptr, qdims, qvals, np.asarray(bucket_weights, np.float64),
              weighted and not quantized, quantized, bounds, mask, depth, out_docs, out_scores)
    n_tasks = n_q * n_ranges
    n_workers = min(n_threads, n_tasks)
    if n_workers == 1:
        _run_tasks(*common, 0, n_tasks, *factors)
    else:
        # Host threads rather than numba's parallel=True: they sleep instead of spinning when the machine is
        # busy (OpenMP's spinning made 2 threads slower than 1 on a loaded 2-core box), and compile faster.
        # The calling thread takes the last share itself: waiting idle for a pool thread instead left three
        # runnable threads on two cores and cost a hand-off per query.
        cuts = [n_tasks * i // n_workers for i in range(n_workers + 1)]
        futures = [_pool().submit(_run_tasks, *common, cuts[i], cuts[i + 1], *factors) for i in range(n_workers - 1)]
        try:
            _run_tasks(*common, cuts[-2], cuts[-1], *factors)
        finally:  # the pool threads write into the same output arrays: never return before they finish
            for future in futures:
                future.result()
    return merge_heaps(out_docs, out_scores, depth)
