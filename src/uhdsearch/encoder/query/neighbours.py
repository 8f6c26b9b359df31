"""Inference-free query rows that see one neighbour: a token's row learned from its occurrences *next to the same
token* (its left neighbour, and separately its right one) in the corpus's sentences encoded as queries.

A unigram row (corpus_table.CorpusTable) averages a token over every context; the full encoder gives it the
context of its query. One neighbour recovers part of that: on SciFact train, rows of (token, left) and (token,
right) pairs, summed, with the unigram row where the corpus never saw either pair, took the sentence table from
0.7072 to 0.7457 binary nDCG@10 (full encoder 0.8969; benchmarks/experiments/lookup_queries.py --sentence-tables).

Pairs are keyed `token * (vocab + 1) + neighbour + 1` in sorted int64 arrays, each with its row of a CSR matrix.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


def keep_largest(sums: sp.csr_matrix, keep: int) -> sp.csr_matrix:
    """Each row's `keep` largest positive entries, L2-normalized (a row's scale does not matter: max-pool of rows
    of one query, then binary or normalized scoring); equal values: the lower dim first."""
    sums = sums.tocsr(copy=True)
    sums.sum_duplicates()
    sums = sums.tocoo()
    positive = sums.data > 0
    rows, cols, vals = sums.row[positive], sums.col[positive], sums.data[positive]
    order = np.lexsort((cols, -vals, rows))  # per row: largest first, then the lower dim
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = np.searchsorted(rows, rows, side="left")  # each entry's row start (rows are sorted)
    kept = np.arange(rows.shape[0]) - starts < keep
    rows, cols, vals = rows[kept], cols[kept], vals[kept]
    norms = np.sqrt(np.bincount(rows, weights=vals.astype(np.float64) ** 2, minlength=sums.shape[0]))
    return sp.csr_matrix((vals / norms[rows], (rows, cols)), shape=sums.shape)


def pair_keys(tokens: np.ndarray, neighbours: np.ndarray, vocab: int) -> np.ndarray:
    return np.asarray(tokens, np.int64) * (vocab + 1) + np.asarray(neighbours, np.int64) + 1


@dataclass(frozen=True)
class NeighbourRows:
    """One bucket's rows of (token, left neighbour) and (token, right neighbour) pairs, L2-normalized."""

    vocab: int
    left_keys: np.ndarray
    left: sp.csr_matrix
    right_keys: np.ndarray
    right: sp.csr_matrix

    def token_rows(self, ids: np.ndarray, positions: np.ndarray, fallback: sp.csr_matrix, keep: int) -> sp.csr_matrix:
        """(len(positions), dim) CSR: per position p of the token sequence `ids` (texts wrapped in [CLS] ... [SEP],
        so p - 1 and p + 1 stay inside p's text), the sum of its left and right pair rows that exist, cut to its
        `keep` largest dims, or `fallback`'s row of the token, as it is, where neither pair does."""
        tokens = ids[positions]
        parts, owners = [], []
        for keys, rows, neighbours in ((self.left_keys, self.left, ids[positions - 1]),
                                       (self.right_keys, self.right, ids[positions + 1])):
            if keys.shape[0] == 0:
                continue
            wanted = pair_keys(tokens, neighbours, self.vocab)
            at = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
            found = (keys[at] == wanted) & (np.diff(rows.indptr)[at] > 0)  # an empty pair row hides nothing
            parts.append(rows[at[found]])
            owners.append(np.flatnonzero(found))
        seen = np.zeros(len(positions), bool)
        for o in owners:
            seen[o] = True
        owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        stacked = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, fallback.shape[1]), dtype=np.float32)
        gather = sp.csr_matrix((np.ones(owner.shape[0], np.float32), (owner, np.arange(owner.shape[0]))),
                               shape=(len(positions), owner.shape[0]))
        pairs = keep_largest(gather @ stacked, keep)  # rows of unseen positions stay empty
        alone = sp.diags((~seen).astype(np.float32)) @ fallback[tokens]
        return (pairs + alone).astype(np.float32).tocsr()


class NeighbourTable:
    """Accumulates, per bucket, the winners of every (token, neighbour) pair; `rows(keep)` summarises them."""

    def __init__(self, vocab: int, dim: int, n_buckets: int) -> None:
        self.vocab, self.dim = vocab, dim
        # per bucket and side (left, right): runs of sorted (pair key * dim + winner dim) with summed values; a run
        # is merged with the one before it while that is less than twice its size, so each entry is merged
        # O(log n) times (merging everything every few batches made the build quadratic in the corpus)
        self._runs: list[list[list]] = [[[], []] for _ in range(n_buckets)]
        self._pending: list[list[list]] = [[[], []] for _ in range(n_buckets)]

    def add(self, token_ids: np.ndarray, left: np.ndarray, right: np.ndarray, winners) -> None:
        """One batch of tokens: their ids, their left and right neighbours' ids, per bucket (values, dims)."""
        for b, (values, dims) in enumerate(winners):
            k = dims.shape[1]
            entries = dims.reshape(-1).numpy().astype(np.int64)
            data = values.float().clamp_min(0).reshape(-1).numpy()
            for side, neighbours in enumerate((left, right)):
                keys = np.repeat(pair_keys(token_ids, neighbours, self.vocab), k) * self.dim + entries
                self._pending[b][side].append((keys, data))
                if len(self._pending[b][side]) >= 16:
                    self._merge(b, side)

    def _merge(self, b: int, side: int, everything: bool = False) -> None:
        runs = self._runs[b][side]
        if self._pending[b][side]:
            runs.append(_summed(*(np.concatenate(x) for x in zip(*self._pending[b][side]))))
            self._pending[b][side] = []
        while len(runs) > 1 and (everything or runs[-2][0].shape[0] < 2 * runs[-1][0].shape[0]):
            later, earlier = runs.pop(), runs.pop()
            runs.append(_summed(np.concatenate([earlier[0], later[0]]), np.concatenate([earlier[1], later[1]])))

    def rows(self, keep: int) -> list[NeighbourRows]:
        """Per bucket, each pair's `keep` largest summed winners, L2-normalized (ties: the lower dim first)."""
        out = []
        for b in range(len(self._runs)):
            sides = []
            for side in range(2):
                self._merge(b, side, everything=True)
                runs = self._runs[b][side]
                combined, sums = runs[0] if runs else (np.zeros(0, np.int64), np.zeros(0))
                keys, row = np.unique(combined // self.dim, return_inverse=True)
                sums = sp.csr_matrix((sums, (row, combined % self.dim)), shape=(keys.shape[0], self.dim))
                sides += [keys, keep_largest(sums, keep).astype(np.float32).tocsr()]
            out.append(NeighbourRows(self.vocab, *sides))
        return out


def _summed(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the sum of each key's values (float32: the sums only rank a pair's dims)."""
    unique, inverse = np.unique(keys, return_inverse=True)
    return unique, np.bincount(inverse, weights=values).astype(np.float32)
