"""A doc-major copy of a bucket's frequent dims, kept in memory for the cascade's second pass (search/cascade.py).

The first pass scores the query dims active in at most `min_count` documents; the second counts the rest for a
few hundred candidates. With a ForwardStore each candidate's bits of all bitmap dims above `min_count` are one
contiguous row (kernels/forward.py), so the second pass reads ~2 KB per candidate instead of taking a cache miss
per candidate and dim. It is derived from the postings when first asked for (5-7 s on 2 cores and 1.9 KB per
document at 1M documents of the quickstart model's density) and never stored on disk; the counts are the same
either way.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from uhdsearch.index.codec import CompressedPostings, n_words
from uhdsearch.index.kernels.forward import TRANSPOSE_WORDS, forward_counts, transpose_rows
from uhdsearch.index.kernels.probe import probe_counts
from uhdsearch.sparse import SparseEncoding


@dataclass(frozen=True)
class ForwardStore:
    """rows[doc] bit c: dim dims[c] active in doc; column[d]: d's column, or -1 when d is not in the store."""

    min_count: int
    dims: np.ndarray  # (n_columns,) int64
    column: np.ndarray  # (dim,) int64
    rows: np.ndarray  # (n_documents, ceil(n_columns / 64)) uint64

    @classmethod
    def build(cls, postings: CompressedPostings, n_documents: int, min_count: int,
              n_threads: int | None = None) -> ForwardStore:
        """The bitmap-stored dims active in more than `min_count` documents (list dims are rare: they stay with
        the probes of kernels/probe.py)."""
        bitmap_rows = np.asarray(postings.bitmap_rows)
        frequencies = np.diff(np.asarray(postings.indptr))
        dims = np.flatnonzero((bitmap_rows >= 0) & (frequencies > min_count)).astype(np.int64)
        column = np.full(bitmap_rows.shape[0], -1, np.int64)
        column[dims] = np.arange(dims.shape[0])
        rows = np.zeros((n_documents, (dims.shape[0] + 63) // 64), np.uint64)
        words = n_words(n_documents)
        n_blocks = (words + TRANSPOSE_WORDS - 1) // TRANSPOSE_WORDS
        n_threads = n_threads or min(8, len(os.sched_getaffinity(0)))
        cuts = [n_blocks * i // n_threads for i in range(n_threads + 1)]
        args = (bitmap_rows, postings.bitmaps, words, dims, n_documents)
        if dims.shape[0] and n_documents:
            with ThreadPoolExecutor(n_threads) as pool:  # disjoint document blocks: no two threads share a row
                list(pool.map(lambda i: transpose_rows(*args, cuts[i], cuts[i + 1], rows), range(n_threads)))
        rows.setflags(write=False)
        return cls(int(min_count), dims, column, rows)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.column.nbytes + self.dims.nbytes)

    def add_counts(self, qdims: np.ndarray, qvals: np.ndarray, quantized: bool, docs: np.ndarray,
                   counts: np.ndarray) -> np.ndarray:
        """counts += the stored query dims active in each of docs (their integer weights when `quantized`);
        returns the mask of query entries not in the store (to be probed)."""
        outside = np.empty(qdims.shape[0], np.bool_)
        forward_counts(self.rows, self.column, qdims, qvals, quantized, docs, counts, outside)
        return outside


class KeptStores:
    """One ForwardStore per bucket, built once, under a lock (searches in other threads wait for it rather than
    build their own), for the first share asked for once `after` query rows have asked. The store is never rebuilt
    for another share: a dim it lacks is probed, so the counts never depend on it, and a client asking for a tiny
    share cannot grow it to the whole index or stall other searches with a rebuild."""

    def __init__(self, n_buckets: int):
        self.stores: list[ForwardStore | None] = [None] * n_buckets
        self.asked = 0  # query rows that asked, before the store was built
        self._lock = threading.Lock()

    def keep(self, buckets: list[CompressedPostings], n_documents: int, min_count: int, n_queries: int = 0,
             after: int = 0) -> None:
        if all(s is not None for s in self.stores):
            return
        with self._lock:
            self.asked += n_queries
            if self.asked < after or all(s is not None for s in self.stores):
                return
            stores = [ForwardStore.build(postings, n_documents, min_count) for postings in buckets]
            self.stores = stores  # one assignment: a search sees all of them or none

    def __getstate__(self) -> dict:  # a pickled index (joblib, multiprocessing) leaves the derived rows behind
        return {"n_buckets": len(self.stores)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["n_buckets"])


def overlap_counts(buckets: list[CompressedPostings], stores: list[ForwardStore | None], n_documents: int,
                   query: SparseEncoding, numbers: np.ndarray, quantized: bool) -> np.ndarray:
    """InvertedIndex.overlap_counts (arguments checked): a bucket's dims in its store from their doc-major rows,
    the others by a bit test or block seek per document (kernels/probe.py)."""
    numbers = np.asarray(numbers, np.int64)
    order = np.argsort(numbers, kind="stable")
    docs = np.ascontiguousarray(numbers[order])
    counts = np.zeros((len(buckets), numbers.shape[0]), np.int64)
    words = n_words(n_documents)
    for b, (postings, m) in enumerate(zip(buckets, query.buckets)):
        if m.nnz == 0 or docs.shape[0] == 0:
            continue
        sorted_counts = np.zeros(docs.shape[0], np.int64)
        qdims, qvals = np.asarray(m.indices, np.int64), np.asarray(m.data, np.float32)
        store = stores[b]
        if store is not None:
            outside = store.add_counts(qdims, qvals, quantized, docs, sorted_counts)
            qdims, qvals = qdims[outside], qvals[outside]
        if qdims.shape[0]:
            probe_counts(postings.indptr, postings.bitmap_rows, postings.bitmaps, postings.block_ptr,
                         postings.payload_ptr, postings.blocks, postings.payload, words, qdims, qvals, quantized,
                         docs, sorted_counts)
        counts[b, order] = sorted_counts
    return counts
