"""SparseEncoding: per-bucket sparse vectors of a batch of texts. numpy/scipy only, shared by encoder and index."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import UsageError
from uhdsearch.topk import tie_order
from uhdsearch.types import check_k


@dataclass
class SparseEncoding:
    """One CSR matrix per bucket, each (n_texts, dim) float32 with sorted column indices.

    `truncated` flags, per row, a text the encoder cut to its maximum length (None where not recorded).
    """

    buckets: list[sp.csr_matrix]
    truncated: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.buckets:
            raise UsageError("a SparseEncoding needs at least one bucket")
        shapes = {m.shape for m in self.buckets}
        if len(shapes) != 1:
            raise UsageError(f"all buckets must have the same shape, got {sorted(shapes)}")
        self.buckets = [_canonical(m) for m in self.buckets]
        if self.truncated is not None:
            self.truncated = np.asarray(self.truncated, dtype=bool)
            if self.truncated.shape != (self.n,):
                raise UsageError(f"truncated has shape {self.truncated.shape}, expected ({self.n},)")

    @classmethod
    def of_canonical(cls, buckets: list[sp.csr_matrix], truncated: np.ndarray | None) -> SparseEncoding:
        """Wrap buckets already in canonical form (float32 CSR, sorted indices, no stored zeros, one shape), e.g.
        entries masked out of another SparseEncoding's, without the copies and checks of the constructor."""
        encoding = cls.__new__(cls)
        encoding.buckets, encoding.truncated = buckets, truncated
        return encoding

    @property
    def n_truncated(self) -> int:
        """How many texts were cut to the encoder's maximum length (0 where not recorded)."""
        return 0 if self.truncated is None else int(self.truncated.sum())

    @property
    def n(self) -> int:
        return self.buckets[0].shape[0]

    @property
    def dim(self) -> int:
        return self.buckets[0].shape[1]

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows) -> SparseEncoding:
        truncated = None if self.truncated is None else self.truncated[rows]
        return SparseEncoding([m[rows] for m in self.buckets], truncated)

    def binarize(self) -> SparseEncoding:
        """Every stored non-zero becomes 1.0 (§3.7)."""
        out = []
        for m in self.buckets:
            b = m.copy()
            b.data = np.ones_like(b.data)
            out.append(b)
        return SparseEncoding(out, self.truncated)

    def truncate(self, top_k: int | None, scales: Sequence[np.ndarray] | None = None) -> SparseEncoding:
        """Keep each row's `top_k` largest values per bucket (query_k, Table 4); ties to the lower dim.

        Args:
            scales: optional per-bucket (dim,) factors that rank dimensions by value x scale (e.g. idf);
                the kept values themselves are not changed.
        """
        if top_k is None:
            return self
        top_k = check_k(top_k, "query_k")
        if scales is None:
            scales = [None] * self.n_buckets
        return SparseEncoding([_row_top_k(m, top_k, s) for m, s in zip(self.buckets, scales)], self.truncated)

    def active_per_row(self) -> np.ndarray:
        """(n, n_buckets) int64 number of active dimensions."""
        return np.stack([np.diff(m.indptr) for m in self.buckets], axis=1)

    @staticmethod
    def concat(parts: Sequence[SparseEncoding]) -> SparseEncoding:
        if not parts:
            raise UsageError("nothing to concatenate")
        n_buckets = {p.n_buckets for p in parts}
        if len(n_buckets) != 1:
            raise UsageError(f"parts have different bucket counts: {sorted(n_buckets)}")
        flags = [p.truncated for p in parts]
        truncated = None if any(f is None for f in flags) else np.concatenate(flags)
        return SparseEncoding(
            [sp.vstack([p.buckets[b] for p in parts], format="csr") for b in range(parts[0].n_buckets)], truncated
        )


def _canonical(m) -> sp.csr_matrix:
    m = sp.csr_matrix(m, dtype=np.float32)
    m.eliminate_zeros()
    m.sort_indices()
    return m


def _row_top_k(m: sp.csr_matrix, top_k: int, scale: np.ndarray | None = None) -> sp.csr_matrix:
    indptr, indices, data = m.indptr, m.indices, m.data
    keep_rows, keep_cols, keep_vals = [], [], []
    for r in range(m.shape[0]):
        lo, hi = indptr[r], indptr[r + 1]
        cols, vals = indices[lo:hi], data[lo:hi]
        if hi - lo > top_k:
            key = vals if scale is None else vals * scale[cols]
            order = tie_order(key, cols)[:top_k]  # key desc, then dim asc
            cols, vals = cols[order], vals[order]
        keep_rows.append(np.full(len(cols), r, dtype=np.int64))
        keep_cols.append(cols)
        keep_vals.append(vals)
    rows = np.concatenate(keep_rows) if keep_rows else np.zeros(0, np.int64)
    cols = np.concatenate(keep_cols) if keep_cols else np.zeros(0, np.int32)
    vals = np.concatenate(keep_vals) if keep_vals else np.zeros(0, np.float32)
    return sp.csr_matrix((vals, (rows, cols)), shape=m.shape, dtype=np.float32)
