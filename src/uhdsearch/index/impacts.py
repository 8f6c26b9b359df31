"""Document impacts as bit-planes: weighted search through the binary kernels' integer-weight adder.

A weighted index keeps a float per posting, and its search walks bitmaps bit by bit (~37x binary at 1M documents).
Here each document value is quantized to a level 1..2^b - 1 (equal-frequency bins over all postings of its bucket),
and bit p of the level of dim d becomes a binary dim of its own, d * b + p: plane p. A query value, quantized per
query to a level 1..2^c - 1, enters plane p of its dim with the integer weight level x 2^p, so the kernels'
quantized scoring (weights 1..15 as shifted adds into one bit-sliced counter; kernels/levels.py) sums
q_level(d) x doc_level(d) over the shared dims, exactly. The weights must stay below 16: (2^c - 1) 2^(b - 1) <= 15
allows (b, c) = (1, 4), (2, 3), (3, 2), (4, 1); b = 1 is binary documents with 4-bit queries.

How close the quantized ranking comes to float weighted search, and what it costs against binary search, is in
benchmarks/experiments/impact_planes.py.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import DimensionMismatchError, IndexFormatError, UsageError
from uhdsearch.index.base import IndexCapabilities
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, encode_corpus
from uhdsearch.sparse import SparseEncoding

PAIRS = ((1, 4), (2, 3), (3, 2), (4, 1))  # (document bits, query bits) whose products fit the 4-bit weights
DOC_BITS, QUERY_BITS = 2, 3  # chosen on SciFact train (benchmarks/experiments/impact_planes.py)
META_KEY = "impact_planes"


def check_bits(doc_bits: int, query_bits: int) -> None:
    if (doc_bits, query_bits) not in PAIRS:
        raise UsageError(f"doc_bits={doc_bits}, query_bits={query_bits}: choose one of {list(PAIRS)} "
                         "(level products must stay within the kernels' 4-bit weights)")


def impact_edges(values: np.ndarray, doc_bits: int) -> np.ndarray:
    """(2^b - 2,) ascending float32 bin edges giving the postings' values equal-frequency levels 1..2^b - 1.

    Examples:
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

    Examples:
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


class ImpactPlanes(IndexCapabilities):
    """A binary index of document planes and what it takes to search it with float queries.

    Searchable like a weighted index (`variant` "weighted", `search_encoded(..., "weighted")`), so `Searcher` and
    `uhdsearch search` take it; explicit stop dimensions use the original dims' document frequencies, kept in the
    manifest (the default keeps every dim).

    Examples:
        >>> docs = SparseEncoding([sp.csr_matrix(np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]], np.float32))])
        >>> planes = ImpactPlanes.from_encoding(docs, ["a", "b", "c"], doc_bits=2, query_bits=3)
        >>> query = SparseEncoding([sp.csr_matrix(np.array([[1.0, 0.1]], np.float32))])
        >>> numbers, scores = planes.search_encoded(query, 3)
        >>> numbers.tolist(), scores.tolist()  # levels: a (3, 1), b (1, 3), c (2, 2); the query (7, 1)
        ([[0, 2, 1]], [[22.0, 16.0, 10.0]])
    """

    variant = "weighted"
    # Searcher's max_df="auto" keeps every dim here: on SciFact train the planes reach 0.8021 nDCG@10 with every
    # dim and 0.7939 without those above 0.3 (benchmarks/experiments/impact_planes.py)
    stop_dimensions_by_default = False
    length_norm_supported = False  # its binary dims are value planes, not the documents' active dims
    scores_own_contributions = True  # it quantizes the query as a whole: contributions() says what each dim adds

    def __init__(self, index: BinaryIndex, dim: int, doc_bits: int, query_bits: int, edges: list[np.ndarray],
                 document_frequencies: list[np.ndarray]):
        check_bits(doc_bits, query_bits)
        self.index = index
        self._dim = dim
        self.doc_bits = doc_bits
        self.query_bits = query_bits
        self.edges = edges
        self._document_frequencies = document_frequencies

    @classmethod
    def from_encoding(cls, documents: SparseEncoding, doc_ids: Sequence[str], doc_bits: int = DOC_BITS,
                      query_bits: int = QUERY_BITS, encoder_digest: str | None = None,
                      path: str | os.PathLike | None = None, overwrite: bool = False) -> ImpactPlanes:
        """Quantize the documents' values (a weighted encoding) and index their planes; path=None: in memory."""
        check_bits(doc_bits, query_bits)
        edges = [impact_edges(m.data, doc_bits) for m in documents.buckets]
        dfs = [np.bincount(m.indices, minlength=documents.dim).astype(np.int64) for m in documents.buckets]
        index = BinaryIndex.from_encoding(document_planes(documents, edges, doc_bits), doc_ids, None, encoder_digest)
        planes = cls(index, documents.dim, doc_bits, query_bits, edges, dfs)
        if path is not None:
            planes.save(path, overwrite)
        return planes

    @classmethod
    def build(cls, encoder, corpus, path: str | os.PathLike, batch_size: int = 32, overwrite: bool = False,
              show_progress: bool = True, doc_bits: int = DOC_BITS, query_bits: int = QUERY_BITS) -> ImpactPlanes:
        """Encode `corpus` with `encoder` (as InvertedIndex.build) and write its plane index to `path`."""
        check_bits(doc_bits, query_bits)
        encoding, doc_ids = encode_corpus(encoder, corpus, path, batch_size, overwrite, show_progress)
        return cls.from_encoding(encoding, doc_ids, doc_bits, query_bits, encoder.digest(), path, overwrite)

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the plane index atomically; the manifest carries the bits, edges and document frequencies."""
        self.index.meta[META_KEY] = {
            "dim": self._dim, "doc_bits": self.doc_bits, "query_bits": self.query_bits,
            "edges": [e.astype(float).tolist() for e in self.edges],
            "document_frequencies": [f.tolist() for f in self._document_frequencies]}
        self.index.save(path, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool | None = None) -> ImpactPlanes:
        index = InvertedIndex.load(path, mmap=mmap)
        return cls.of_index(index)

    @classmethod
    def of_index(cls, index: InvertedIndex) -> ImpactPlanes:
        """The planes an opened binary index holds (IndexFormatError when its manifest does not say so)."""
        info = index.meta.get(META_KEY)
        if info is None:
            raise IndexFormatError(f"{index.path} is not an impact-plane index (no {META_KEY!r} in its manifest)")
        try:
            planes = cls(index, int(info["dim"]), int(info["doc_bits"]), int(info["query_bits"]),
                         [np.asarray(e, np.float32) for e in info["edges"]],
                         [np.asarray(f, np.int64) for f in info["document_frequencies"]])
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise IndexFormatError(f"{index.path}: bad {META_KEY!r} in the manifest: {exc}") from exc
        if index.dim != planes.dim * planes.doc_bits or len(planes.edges) != index.n_buckets or len(
                planes._document_frequencies) != index.n_buckets or any(
                f.shape != (planes.dim,) for f in planes._document_frequencies):
            raise IndexFormatError(f"{index.path}: the manifest's {META_KEY!r} does not match the index's shape")
        return planes

    # the SearchableIndex contract
    @property
    def dim(self) -> int:
        return self._dim

    @property
    def n_buckets(self) -> int:
        return self.index.n_buckets

    @property
    def doc_ids(self) -> list[str]:
        return self.index.doc_ids

    @property
    def n_documents(self) -> int:
        return self.index.n_documents

    @property
    def encoder_digest(self) -> str | None:
        return self.index.encoder_digest

    @property
    def path(self):
        return self.index.path

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        return self._document_frequencies[bucket]

    def warm_up(self, background: bool = False):
        return self.index.warm_up(background)

    def contributions(self, query: SparseEncoding, number: int, bucket_weights: Sequence[float]
                      ) -> list[tuple[int, int, float, float]]:
        """(bucket, dim, query value, contribution) of every query dim document `number` shares, as the score sums
        them: query level (from the whole query) x document level x bucket weight (serving/explain.py's)."""
        leveled = query_levels(query, self.query_bits)
        rows = [(b, int(d), float(v), float(level)) for b, (m, q) in enumerate(zip(query.buckets, leveled.buckets))
                for d, v, level in zip(m.indices, m.data, q.data)]
        if not rows:
            return []
        outside = np.ones(len(self.doc_ids), dtype=bool)
        outside[number] = False
        probes = []  # one row per (query dim, plane): is the document in that plane?
        for b in range(self.n_buckets):
            entries = [(i, row[1] * self.doc_bits + p) for i, row in enumerate(rows) if row[0] == b
                       for p in range(self.doc_bits)]
            probes.append(sp.csr_matrix((np.ones(len(entries), np.float32),
                                         ([i * self.doc_bits + (c % self.doc_bits) for i, c in entries],
                                          [c for _, c in entries])),
                                        shape=(len(rows) * self.doc_bits, self.dim * self.doc_bits)))
        numbers, _ = self.index.search_encoded(SparseEncoding(probes), 1, [1.0] * self.n_buckets, "quantized",
                                               deleted=outside)
        in_plane = (numbers[:, 0] == number).reshape(len(rows), self.doc_bits)
        doc_level = in_plane @ (1 << np.arange(self.doc_bits))
        weights = [1.0] * self.n_buckets if bucket_weights is None else list(bucket_weights)
        return [(b, d, v, float(weights[b] * level * doc_level[i]))
                for i, (b, d, v, level) in enumerate(rows) if doc_level[i] > 0]

    def search_encoded(self, queries: SparseEncoding, k: int, bucket_weights: Sequence[float] | None = None,
                       scoring: str = "weighted", deleted: np.ndarray | None = None,
                       n_threads: int | None = None, length_norm: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of sum over shared dims of query level x document level (InvertedIndex's contract).

        length_norm: must be 0; the levels already carry the document's values (its plane bits are not dims)."""
        if length_norm:
            raise UsageError(f"length_norm={length_norm!r}: an impact-plane index scores document levels, which "
                             "length normalization does not apply to; pass 0")
        if queries.dim != self.dim or queries.n_buckets != self.index.n_buckets:
            raise DimensionMismatchError(f"the queries have dim={queries.dim} and {queries.n_buckets} buckets; the "
                                         f"planes were built for dim={self.dim} and {self.index.n_buckets}")
        if scoring != "weighted":
            raise UsageError(f"scoring={scoring!r}: an impact-plane index scores its quantized weights ('weighted')")
        weights = [1.0] * self.index.n_buckets if bucket_weights is None else list(bucket_weights)
        return self.index.search_encoded(query_planes(queries, self.doc_bits, self.query_bits), k, weights,
                                         "quantized", deleted=deleted, n_threads=n_threads)


def refuse_planes(index: InvertedIndex, what: str) -> None:
    """UsageError when `index` holds impact planes, which `what` would read as a binary index of dim x b."""
    if META_KEY in index.meta:
        raise UsageError(f"{index.path} is an impact-plane index; {what} takes binary or weighted indexes "
                         "(build one with `uhdsearch index --variant binary|weighted`)")
