"""Stop dimensions and IDF weights of query dimensions, from the index's per-dimension document frequencies.

The most frequent UHD dimensions behave like stopwords: they cost the most bytes to scan and tell documents apart
least. `QueryWeighting` drops the query dims active in more than `max_df` of the documents and, with `idf`, gives
each kept dim an IDF weight: quantized to integer levels 1..15 for binary scoring (the kernels' "quantized" mode:
exact, the weights' bit-planes added into one bit-sliced counter that reads a binary query's bytes once; see
index/kernels/levels.py), or multiplied into the query values for weighted scoring.

The default (`max_df="auto"`) is 0.3, chosen on SciFact's train queries (benchmarks/experiments/stop_dims.py), on
indexes of at least 1,000 documents: a threshold that is a share of the documents is degenerate on tiny indexes (on 3
documents every dim is active in at least a third of them), and on SciFact train sub-corpora 0.3 never lost from
1,000 documents on (benchmarks/experiments/stop_dims_floor.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import UsageError
from uhdsearch.index.kernels.levels import MAX_LEVEL
from uhdsearch.sparse import SparseEncoding


AUTO = "auto"
DEFAULT_MAX_DF = 0.3
MIN_DOCUMENTS = 1000  # below this the default drops nothing


def idf(document_frequencies: np.ndarray, n_documents: int) -> np.ndarray:
    """BM25's IDF, log(1 + (N - df + 0.5) / (df + 0.5)): positive for every df, float64.

    Examples:
        >>> idf(np.array([1, 50, 100]), 100).round(3).tolist()
        [4.21, 0.693, 0.005]
    """
    df = np.asarray(document_frequencies, np.float64)
    return np.log1p((n_documents - df + 0.5) / (df + 0.5))


def idf_levels(weights: np.ndarray, n_documents: int, levels: int = MAX_LEVEL) -> np.ndarray:
    """IDF weights -> integer levels 1..levels, linear in the IDF of a dimension active in one document.

    The scale is the index's, not the query's, so a level means the same IDF in every query.

    Examples:
        >>> idf_levels(idf(np.array([1, 50, 100]), 100), 100).tolist()
        [15.0, 2.0, 1.0]
    """
    top = float(idf(np.array([1]), max(n_documents, 1))[0])
    return np.clip(np.rint(np.asarray(weights) / top * levels), 1, levels).astype(np.float32)


@dataclass
class QueryWeighting:
    """Per-query-dim stop-dimension dropping and IDF weighting over one index's document frequencies.

    Args:
        document_frequencies: (dim,) per bucket, live documents per dimension (`SearchableIndex`'s).
        n_documents: live documents.
        max_df: drop query dims active in more than this fraction of the documents (0 < max_df <= 1); None keeps all.
        idf: weight each kept dim by its IDF.

    Examples:
        >>> w = QueryWeighting([np.array([9, 1, 5, 0])], 10, max_df=0.5, idf=True)
        >>> q = SparseEncoding([sp.csr_matrix(np.array([[0.3, 0.2, 0.1, 0.4]], np.float32))])
        >>> w.drop(q).buckets[0].toarray().tolist()  # dim 0 (df 0.9) is a stop dim; dim 3 matches nothing
        [[0.0, 0.20000000298023224, 0.10000000149011612, 0.0]]
        >>> w.quantize(w.drop(q)).buckets[0].toarray().tolist()
        [[0.0, 15.0, 5.0, 0.0]]
    """

    document_frequencies: list[np.ndarray]
    n_documents: int
    max_df: float | None = None
    idf: bool = False
    _idf: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_df is not None and not (0.0 < float(self.max_df) <= 1.0):
            raise UsageError(f"max_df={self.max_df!r} must be a fraction of the documents in (0, 1]")
        self._idf = [idf(df, self.n_documents) for df in self.document_frequencies]

    @classmethod
    def of_index(cls, index, max_df: float | None = None, idf: bool = False) -> QueryWeighting:
        """Read the index's document frequencies once (a segmented index sums them over its live documents)."""
        dfs = [np.asarray(index.document_frequencies(b), np.int64) for b in range(index.n_buckets)]
        return cls(dfs, int(index.n_documents), max_df, idf)

    @property
    def active(self) -> bool:
        return self.max_df is not None or self.idf

    def idf_weights(self, bucket: int = 0) -> np.ndarray:
        return self._idf[bucket]

    def drop(self, queries: SparseEncoding) -> SparseEncoding:
        """Remove stop dims (df above max_df) and dims no document has; values kept."""
        out = []
        for m, df in zip(queries.buckets, self.document_frequencies):
            limit = np.inf if self.max_df is None else self.max_df * self.n_documents
            keep_dim = (df > 0) & (df <= limit)
            out.append(mask_entries(m, keep_dim[m.indices]))
        return SparseEncoding(out, queries.truncated)

    def quantize(self, queries: SparseEncoding) -> SparseEncoding:
        """Values -> the dims' IDF levels (for the kernels' "quantized" scoring)."""
        return SparseEncoding([_with_values(m, idf_levels(w[m.indices], self.n_documents))
                               for m, w in zip(queries.buckets, self._idf)], queries.truncated)

    def scale(self, queries: SparseEncoding) -> SparseEncoding:
        """Values x the dims' IDF (for weighted scoring)."""
        return SparseEncoding([_with_values(m, (m.data * w[m.indices]).astype(np.float32))
                               for m, w in zip(queries.buckets, self._idf)], queries.truncated)


def mask_entries(m: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """The CSR rows of `m` with only the entries where `keep` (one flag per stored entry) is true."""
    if m.shape[0] == 1:  # one query at a time (the cascade's case): no per-entry row numbers to build
        indptr = np.array([0, np.count_nonzero(keep)], m.indptr.dtype)
    else:
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))[keep]
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=m.shape[0])))).astype(m.indptr.dtype)
    return sp.csr_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape)


def _with_values(m: sp.csr_matrix, values: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix((values.astype(np.float32), m.indices.copy(), m.indptr.copy()), shape=m.shape)
