"""Document impacts as bit-planes: weighted search through the binary kernels' integer-weight adder.

A weighted index keeps a float per posting, and its search walks bitmaps bit by bit (~37x binary at 1M documents).
Here each document value is quantized to a level 1..2^b - 1 (equal-frequency bins over all postings of its bucket),
and bit p of the level of dim d becomes a binary dim of its own, d * b + p: plane p. A query value, quantized per
query to a level 1..2^c - 1, enters plane p of its dim with the integer weight level x 2^p, so the kernels'
quantized scoring (weights 1..15 as shifted adds into one bit-sliced counter; kernels/levels.py) sums
q_level(d) x doc_level(d) over the shared dims, exactly. The weights must stay below 16: (2^c - 1) 2^(b - 1) <= 15
allows (b, c) = (1, 4), (2, 3), (3, 2), (4, 1); b = 1 is binary documents with 4-bit queries.

How close the quantized ranking comes to float weighted search, and what it costs against binary search, is in
benchmarks/impact_planes.py.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.sparse import SparseEncoding

PAIRS = ((1, 4), (2, 3), (3, 2), (4, 1))  # (document bits, query bits) whose products fit the 4-bit weights


def check_bits(doc_bits: int, query_bits: int) -> None:
    if (doc_bits, query_bits) not in PAIRS:
        raise UsageError(f"doc_bits={doc_bits}, query_bits={query_bits}: choose one of {list(PAIRS)} "
                         "(level products must stay within the kernels' 4-bit weights)")


def impact_edges(values: np.ndarray, doc_bits: int) -> np.ndarray:
    """(2^b - 2,) ascending float32 bin edges giving the postings' values equal-frequency levels 1..2^b - 1.

    Example:
        >>> impact_edges(np.arange(1, 7, dtype=np.float32), 2).tolist()
        [3.0, 5.0]
    """
    n_levels = (1 << doc_bits) - 1
    values = np.asarray(values, np.float32)
    if values.size == 0:
        return np.zeros(n_levels - 1, np.float32)
    ordered = np.sort(values)
    return ordered[(values.size * np.arange(1, n_levels)) // n_levels]  # the lowest value of each upper level


def levels(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Levels 1..len(edges) + 1 (int64): 1 + the number of edges at or below each value.

    Example:
        >>> levels(np.array([0.5, 3.0, 4.0, 9.0]), np.array([3.0, 5.0])).tolist()
        [1, 2, 2, 3]
    """
    return 1 + np.searchsorted(edges, values, side="right").astype(np.int64)


def document_planes(documents: SparseEncoding, edges: Sequence[np.ndarray], doc_bits: int) -> SparseEncoding:
    """Binary (n, dim * b) rows: column d * b + p is set where bit p of the document's level of dim d is."""
    out = []
    for m, e in zip(documents.buckets, edges):
        m = m.tocsr()
        level = levels(m.data, e)
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        cols, keep_rows = [], []
        for p in range(doc_bits):
            on = (level >> p) & 1 == 1
            cols.append(m.indices[on].astype(np.int64) * doc_bits + p)
            keep_rows.append(rows[on])
        rows_all, cols_all = np.concatenate(keep_rows), np.concatenate(cols)
        planes = sp.csr_matrix((np.ones(rows_all.shape[0], np.float32), (rows_all, cols_all)),
                               shape=(m.shape[0], m.shape[1] * doc_bits))
        planes.sort_indices()
        out.append(planes)
    return SparseEncoding(out)


def query_levels(queries: SparseEncoding, query_bits: int) -> SparseEncoding:
    """Each query's values -> levels 1..2^c - 1, linear in value / the query's largest value over all buckets
    (a ranking does not change when one query's values are scaled, so each query uses its own range)."""
    top = (1 << query_bits) - 1
    row_max = np.zeros(queries.n)
    for m in queries.buckets:
        if m.nnz:
            row_max = np.maximum(row_max, m.max(axis=1).toarray().ravel())
    out = []
    for m in queries.buckets:
        scale = np.repeat(row_max, np.diff(m.indptr))
        value = np.clip(np.rint(m.data / np.where(scale > 0, scale, 1) * top), 1, top)
        out.append(sp.csr_matrix((value.astype(np.float32), m.indices.copy(), m.indptr.copy()), shape=m.shape))
    return SparseEncoding(out, queries.truncated)


def query_planes(queries: SparseEncoding, doc_bits: int, query_bits: int) -> SparseEncoding:
    """Queries (float values) -> integer weights on the planes: column d * b + p gets level(d) x 2^p."""
    leveled = query_levels(queries, query_bits)
    out = []
    for m in leveled.buckets:
        n_entries = np.diff(m.indptr)
        indptr = np.concatenate(([0], np.cumsum(n_entries * doc_bits))).astype(np.int64)
        cols = (m.indices.astype(np.int64)[:, None] * doc_bits + np.arange(doc_bits)).ravel()
        values = (m.data[:, None] * (1 << np.arange(doc_bits))).ravel().astype(np.float32)
        out.append(sp.csr_matrix((values, cols, indptr), shape=(m.shape[0], m.shape[1] * doc_bits)))
    return SparseEncoding(out, queries.truncated)


class ImpactPlanes:
    """A binary index of document planes and what it takes to search it with float queries.

    Example:
        >>> docs = SparseEncoding([sp.csr_matrix(np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]], np.float32))])
        >>> planes = ImpactPlanes.from_encoding(docs, ["a", "b", "c"], doc_bits=2, query_bits=3)
        >>> query = SparseEncoding([sp.csr_matrix(np.array([[1.0, 0.1]], np.float32))])
        >>> numbers, scores = planes.search_encoded(query, 3)
        >>> numbers.tolist(), scores.tolist()  # levels: a (3, 1), b (1, 3), c (2, 2); the query (7, 1)
        ([[0, 2, 1]], [[22.0, 16.0, 10.0]])
    """

    def __init__(self, index: BinaryIndex, dim: int, doc_bits: int, query_bits: int, edges: list[np.ndarray]):
        check_bits(doc_bits, query_bits)
        self.index = index
        self.dim = dim
        self.doc_bits = doc_bits
        self.query_bits = query_bits
        self.edges = edges

    @classmethod
    def from_encoding(cls, documents: SparseEncoding, doc_ids: Sequence[str], doc_bits: int = 2,
                      query_bits: int = 3, encoder_digest: str | None = None) -> ImpactPlanes:
        """Quantize the documents' values (a weighted encoding) and index their planes in memory."""
        check_bits(doc_bits, query_bits)
        edges = [impact_edges(m.data, doc_bits) for m in documents.buckets]
        planes = document_planes(documents, edges, doc_bits)
        return cls(BinaryIndex.from_encoding(planes, doc_ids, None, encoder_digest), documents.dim, doc_bits,
                   query_bits, edges)

    @property
    def doc_ids(self) -> list[str]:
        return self.index.doc_ids

    @property
    def n_documents(self) -> int:
        return self.index.n_documents

    def search_encoded(self, queries: SparseEncoding, k: int, bucket_weights: Sequence[float] | None = None,
                       n_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of sum over shared dims of query level x document level (InvertedIndex's contract)."""
        if queries.dim != self.dim or queries.n_buckets != self.index.n_buckets:
            raise DimensionMismatchError(f"the queries have dim={queries.dim} and {queries.n_buckets} buckets; the "
                                         f"planes were built for dim={self.dim} and {self.index.n_buckets}")
        weights = [1.0] * self.index.n_buckets if bucket_weights is None else list(bucket_weights)
        return self.index.search_encoded(query_planes(queries, self.doc_bits, self.query_bits), k, weights,
                                         "quantized", n_threads=n_threads)
