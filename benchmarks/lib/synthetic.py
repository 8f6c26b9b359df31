"""Synthetic UHD-shaped postings at any size, with the density statistics of a real encoding.

Documents get lengths (active dims) drawn from a real sample; dimension d is active in a share of
documents given by its real document frequency. Both marginals are met at once by fitting, per
length class c and dimension d, an inclusion probability q[c, d] (iterative proportional fitting),
then drawing Binomial(n_c, q[c, d]) documents of class c without replacement. Postings are produced
dimension range by dimension range, so 1M documents never need all postings in memory. Every
dimension has its own random stream: the output does not depend on the range size or thread count.

Benchmark data only (search_speed.py and the tests of tests/benchmarks), imported as benchmarks.lib.synthetic.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numba as nb
import numpy as np


@dataclass(frozen=True)
class DensityProfile:
    """Density statistics of a real encoding (one bucket).

    Attributes:
        doc_frequency: (dim,) float64 share of documents in which each dimension is active, in [0, 1].
        doc_lengths: (m,) int64 sample of active dimensions per document. Its mean should equal
            doc_frequency.sum() (as in any real profile); where they disagree, doc_frequency wins.
        value_quantiles: (q,) float32 evenly spaced quantiles (0..1) of the non-zero document values.
    """

    doc_frequency: np.ndarray
    doc_lengths: np.ndarray
    value_quantiles: np.ndarray

    def __post_init__(self) -> None:
        df = np.asarray(self.doc_frequency, dtype=np.float64)
        if df.ndim != 1 or df.size == 0 or np.any(df < 0) or np.any(df > 1):
            raise ValueError("doc_frequency must be a non-empty (dim,) array of shares in [0, 1]")
        lengths = np.asarray(self.doc_lengths, dtype=np.int64)
        if lengths.ndim != 1 or lengths.size == 0 or np.any(lengths < 0) or np.any(lengths > df.size):
            raise ValueError(f"doc_lengths must be a non-empty sample of counts in 0..{df.size}")
        values = np.asarray(self.value_quantiles, dtype=np.float32)
        if values.ndim != 1 or values.size < 2 or np.any(np.diff(values) < 0):
            raise ValueError("value_quantiles must be at least 2 non-decreasing numbers")
        object.__setattr__(self, "doc_frequency", df)
        object.__setattr__(self, "doc_lengths", lengths)
        object.__setattr__(self, "value_quantiles", values)

    @property
    def dim(self) -> int:
        return int(self.doc_frequency.size)

    @classmethod
    def from_vectors(cls, documents, n_quantiles: int = 1001) -> DensityProfile:
        """Profile of (n_docs, dim) scipy CSR document vectors (one bucket of a SparseEncoding)."""
        csr = documents.tocsr()
        n = csr.shape[0]
        if n == 0:
            raise ValueError("no documents to profile")
        df = np.bincount(csr.indices, minlength=csr.shape[1]) / n
        data = csr.data[csr.data != 0]
        quantiles = np.quantile(data, np.linspace(0, 1, n_quantiles)) if data.size else np.zeros(2)
        return cls(df, np.diff(csr.indptr), quantiles.astype(np.float32))


@dataclass
class PostingsBlock:
    """Postings of dims first_dim .. first_dim + len(indptr) - 2; docs of dim first_dim + j are
    docs[indptr[j]:indptr[j + 1]], ascending. indptr (n + 1,) int64 from 0, docs int32, weights float32."""

    first_dim: int
    indptr: np.ndarray
    docs: np.ndarray
    weights: np.ndarray


class SyntheticPostings:
    """Seeded synthetic postings for `n_documents` documents shaped like `profile`.

    Example:
        >>> import numpy as np
        >>> p = DensityProfile(np.array([0.5, 0.1, 0.9, 0.0]), np.array([1, 2, 2]), np.array([0.1, 1.0]))
        >>> s = SyntheticPostings(p, n_documents=100, seed=0)
        >>> int(s.document_frequencies().sum()) == s.n_postings
        True
    """

    def __init__(self, profile: DensityProfile, n_documents: int, seed: int = 0, n_classes: int = 32):
        if n_documents <= 0:
            raise ValueError(f"n_documents={n_documents} must be positive")
        self.profile = profile
        self.n_documents = int(n_documents)
        self.seed = int(seed)
        rng = np.random.default_rng([self.seed, 1])
        lengths = np.sort(rng.choice(profile.doc_lengths, size=self.n_documents))
        # Equal-count length classes; a random doc-number order so doc number says nothing about length.
        n_classes = max(1, min(n_classes, self.n_documents))
        bounds = np.linspace(0, self.n_documents, n_classes + 1).astype(np.int64)
        self._class_ptr = bounds
        self.class_lengths = np.array([lengths[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])])
        members = rng.permutation(self.n_documents).astype(np.int32)
        for a, b in zip(bounds[:-1], bounds[1:]):
            members[a:b].sort()
        self._members = members
        self.inclusion = _fit_inclusion(self.class_lengths, np.diff(bounds), profile.doc_frequency)
        self._counts = _draw_counts(self.inclusion, np.diff(bounds), self.seed)

    @property
    def dim(self) -> int:
        return self.profile.dim

    @property
    def n_postings(self) -> int:
        return int(self._counts.sum())

    def document_frequencies(self) -> np.ndarray:
        """(dim,) int64 postings per dimension, known before any posting is drawn."""
        return self._counts.sum(axis=1)

    def blocks(self, max_postings: int = 1 << 26) -> Iterator[PostingsBlock]:
        """Consecutive dimension ranges of at most `max_postings` postings (one dim may exceed it)."""
        df = self.document_frequencies()
        start = 0
        while start < self.dim:
            cum = np.cumsum(df[start:])
            stop = start + max(1, int(np.searchsorted(cum, max_postings, side="right")))
            yield self.block(start, stop)
            start = stop

    def block(self, first_dim: int, stop_dim: int) -> PostingsBlock:
        """Postings of dims first_dim .. stop_dim - 1."""
        counts = self._counts[first_dim:stop_dim]
        indptr = np.zeros(stop_dim - first_dim + 1, np.int64)
        np.cumsum(counts.sum(axis=1), out=indptr[1:])
        docs = np.empty(int(indptr[-1]), np.int32)
        weights = np.empty(int(indptr[-1]), np.float32)
        _fill(first_dim, counts, indptr, self._members, self._class_ptr, self.n_documents, self.seed,
              self.profile.value_quantiles, docs, weights)
        return PostingsBlock(first_dim, indptr, docs, weights)


def _fit_inclusion(class_lengths: np.ndarray, class_sizes: np.ndarray, df: np.ndarray,
                   n_iter: int = 200) -> np.ndarray:
    """(n_classes, dim) probabilities min(1, a_c * b_d) whose class rows sum to the class lengths and
    whose size-weighted columns average to df (iterative proportional fitting with clipping)."""
    share = (class_sizes / class_sizes.sum()).astype(np.float64)
    target_rows = np.minimum(class_lengths, df.size).astype(np.float64)
    a = target_rows / max(df.sum(), 1e-12)
    b = df.astype(np.float64).copy()
    _ipf(a, b, share, target_rows, df.astype(np.float64), n_iter)
    return np.minimum(np.outer(a, b), 1.0)


@nb.njit(cache=True)
def _ipf(a, b, share, target_rows, df, n_iter):  # pragma: no cover - compiled
    n_classes, dim = a.size, b.size
    for _ in range(n_iter):
        for d in range(dim):
            col = 0.0
            for c in range(n_classes):
                col += share[c] * min(1.0, a[c] * b[d])
            if col > 0:
                b[d] *= df[d] / col
        for c in range(n_classes):
            row = 0.0
            for d in range(dim):
                row += min(1.0, a[c] * b[d])
            if row > 0:
                a[c] *= target_rows[c] / row


def _draw_counts(inclusion: np.ndarray, class_sizes: np.ndarray, seed: int) -> np.ndarray:
    """(dim, n_classes) int64 Binomial(class size, q[c, d]) with one random stream per dimension."""
    return _binomials(np.ascontiguousarray(inclusion.T), class_sizes.astype(np.int64), seed)


@nb.njit(parallel=True, cache=True)
def _binomials(q, sizes, seed):  # pragma: no cover - compiled
    dim, n_classes = q.shape
    out = np.zeros((dim, n_classes), np.int64)
    for d in nb.prange(dim):
        np.random.seed((seed * 1_000_003 + d) & 0x7FFFFFFF)
        for c in range(n_classes):
            if q[d, c] > 0:
                out[d, c] = np.random.binomial(sizes[c], min(q[d, c], 1.0))
    return out


@nb.njit(parallel=True, cache=True)
def _fill(first_dim, counts, indptr, members, class_ptr, n_docs, seed, quantiles, docs, weights):  # pragma: no cover
    n_dims, n_classes = counts.shape
    n_q = quantiles.size
    for j in nb.prange(n_dims):
        d = first_dim + j
        # A second stream per dimension (the first one drew the counts).
        np.random.seed((seed * 1_000_003 + d + 0x2545F491) & 0x7FFFFFFF)
        lo, hi = indptr[j], indptr[j + 1]
        total = hi - lo
        if total == 0:
            continue
        mark = np.zeros(n_docs, np.uint8)
        pos = lo
        for c in range(n_classes):
            k = counts[j, c]
            a, b = class_ptr[c], class_ptr[c + 1]
            n_c = b - a
            if k == 0:
                continue
            if 2 * k <= n_c:  # rejection: draw distinct members
                got = 0
                while got < k:
                    doc = members[a + np.random.randint(0, n_c)]
                    if mark[doc] == 0:
                        mark[doc] = 1
                        docs[pos] = doc
                        pos += 1
                        got += 1
            else:  # take all, then drop n_c - k distinct ones
                for i in range(a, b):
                    mark[members[i]] = 1
                dropped = 0
                while dropped < n_c - k:
                    doc = members[a + np.random.randint(0, n_c)]
                    if mark[doc] == 1:
                        mark[doc] = 2
                        dropped += 1
                for i in range(a, b):
                    doc = members[i]
                    if mark[doc] == 1:
                        docs[pos] = doc
                        pos += 1
                    else:
                        mark[doc] = 0
        if total * 32 > n_docs:  # dense dim: a scan of the marks is cheaper than a sort
            pos = lo
            for doc in range(n_docs):
                if mark[doc] == 1:
                    docs[pos] = doc
                    pos += 1
        else:
            docs[lo:hi] = np.sort(docs[lo:hi])
        for i in range(lo, hi):
            # inverse CDF by linear interpolation between evenly spaced quantiles
            u = np.random.random() * (n_q - 1)
            t = int(u)
            if t >= n_q - 1:
                weights[i] = quantiles[n_q - 1]
            else:
                f = u - t
                weights[i] = quantiles[t] * (1.0 - f) + quantiles[t + 1] * f
