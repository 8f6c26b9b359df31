"""The testing oracle: brute-force numpy scores, overlap count (binary) or dot product (weighted), Eq. 7 over buckets.

The reference that tests and benchmarks check the index kernels against; no production path uses it (search goes
through `SearchableIndex.search_encoded`). `brute_force_scores` scores every document by sparse matrix products;
`score_query` and `score_bucket` score term at a time over decompressed postings.

Examples:
    >>> import scipy.sparse as sp
    >>> from uhdsearch.sparse import SparseEncoding
    >>> docs = SparseEncoding([sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 1]], np.float32))])
    >>> query = SparseEncoding([sp.csr_matrix(np.array([[0, 2, 3]], np.float32))])
    >>> brute_force_scores(docs, query, [1.0], "binary").tolist()
    [[1.0, 2.0]]
    >>> brute_force_scores(docs, query, [1.0], "weighted").tolist()
    [[2.0, 5.0]]
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.index.base import Scoring
from uhdsearch.index.inverted import Postings
from uhdsearch.sparse import SparseEncoding


def score_bucket(postings: Postings, dims: np.ndarray, values: np.ndarray, n_docs: int, scoring: Scoring) -> np.ndarray:
    """Term-at-a-time scores of one query in one bucket; (n_docs,) float64.

    Binary: number of the query's active dims the document shares. Weighted: sum of query x document values.
    Quantized: sum of the query's values over the dims the document shares.
    """
    starts, ends = postings.indptr[dims], postings.indptr[dims + 1]
    lengths = ends - starts
    if lengths.sum() == 0:
        return np.zeros(n_docs)
    positions = _ranges(starts, lengths)
    docs = np.asarray(postings.docs)[positions]
    if scoring == "binary":
        return np.bincount(docs, minlength=n_docs).astype(np.float64)
    if scoring == "quantized":
        return np.bincount(docs, weights=np.repeat(values.astype(np.float64), lengths), minlength=n_docs)
    if postings.weights is None:
        raise UsageError("weighted scoring needs a WeightedIndex (this index stores no posting weights)")
    products = np.repeat(values.astype(np.float64), lengths) * np.asarray(postings.weights)[positions]
    return np.bincount(docs, weights=products, minlength=n_docs)


def score_query(
    postings: Sequence[Postings], query: SparseEncoding, row: int, n_docs: int, bucket_weights: Sequence[float],
    scoring: Scoring,
) -> np.ndarray:
    """Eq. 7 over buckets for row `row` of `query`; (n_docs,) float64."""
    total = np.zeros(n_docs)
    for bucket, (p, weight) in enumerate(zip(postings, bucket_weights)):
        if weight == 0:
            continue
        m = query.buckets[bucket]
        lo, hi = m.indptr[row], m.indptr[row + 1]
        total += weight * score_bucket(p, m.indices[lo:hi].astype(np.int64), m.data[lo:hi], n_docs, scoring)
    return total


def brute_force_scores(
    documents: SparseEncoding, queries: SparseEncoding, bucket_weights: Sequence[float], scoring: Scoring,
    length_norm: float = 0.0,
) -> np.ndarray:
    """(n_queries, n_docs) float64 scores by sparse matrix products: the test oracle.

    length_norm: each bucket's product times max(n_d, 1) ** -length_norm, n_d the document's active dims there.
    """
    if scoring == "binary":
        documents, queries = documents.binarize(), queries.binarize()
    elif scoring == "quantized":
        documents = documents.binarize()
    total = np.zeros((queries.n, documents.n))
    for weight, q, d in zip(bucket_weights, queries.buckets, documents.buckets):
        products = weight * (q.astype(np.float64) @ d.astype(np.float64).T).toarray()
        if length_norm:
            products = products * np.maximum(np.diff(d.indptr), 1).astype(np.float64) ** -float(length_norm)
        total += products
    return total


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) for each (s, n), vectorised."""
    total = int(lengths.sum())
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets
