"""A query's other tokens vote on each token's winners: a context choice for inference-free queries, no network.

A table row fixes one set of dims per token (or neighbour pair) for every query. The full encoder instead lets the
rest of the query choose each token's winners, and benchmarks/experiments/lookup_queries.py --ceiling measured that
most of what a table loses is that choice. Here each token's row is its candidate set (its `keep` largest dims);
every row is scaled to a largest value of 1, and a candidate dim d of token t scores

    row_t[d] + vote * sum over the text's other tokens u of row_u[d]

so a dim that other words of the query also point to wins over one only this token points to. Each token keeps its
`winners` best candidates (ties to the lower dim, as the WTA head breaks them); the text's vector is their max-pool.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import UsageError


def check_vote(vote: float | None, winners: int | None, keep: int | None) -> None:
    """UsageError unless vote and winners come together, vote >= 0 is finite, and 1 <= winners <= keep."""
    if vote is None and winners is None:
        return
    if vote is None or winners is None or keep is None:
        raise UsageError("a context vote needs neighbour rows, a vote weight and a number of winners together")
    if not np.isfinite(vote) or vote < 0:
        raise UsageError(f"vote={vote}: the other tokens' weight must be a finite number >= 0")
    if isinstance(winners, bool) or not isinstance(winners, (int, np.integer)) or not 1 <= winners <= keep:
        raise UsageError(f"winners={winners}: each token keeps 1..keep ({keep}) of its candidate dims")


def vote_pool(rows: sp.csr_matrix, owner: np.ndarray, n_texts: int, vote: float, winners: int) -> sp.csr_matrix:
    """(n_texts, dim) CSR: each text's max-pool of its tokens' voted winners.

    rows: one candidate row per token (values > 0); owner: each row's text. The values are the vote scores, so they
    grow with the number of tokens that point to a dim (searches binarize or re-weight them).

    Example (two tokens of one text; the second's row points to dim 2, so the first keeps dim 2 over dim 0; dim 2
    then scores 0.9 + 0.5 x 1.0 for the first token and 1.0 + 0.5 x 0.9 for the second, which the pool keeps):
        >>> rows = sp.csr_matrix(np.array([[1.0, 0, 0.9, 0], [0, 0, 1.0, 0.5]], np.float32))
        >>> vote_pool(rows, np.array([0, 0]), 1, 0.5, 1).toarray().astype(float).round(2).tolist()
        [[0.0, 0.0, 1.45, 0.0]]
        >>> vote_pool(rows, np.array([0, 0]), 1, 0.0, 1).toarray().astype(float).round(2).tolist()
        [[1.0, 0.0, 1.0, 0.0]]
    """
    rows = rows.tocsr(copy=True)
    rows.eliminate_zeros()  # an explicit zero is no candidate (and would scale a row of zeros by 0)
    dim = rows.shape[1]
    if owner.shape[0] != rows.shape[0] or (owner.shape[0] and not 0 <= owner.min() <= owner.max() < n_texts):
        raise ValueError(f"owner: one text number in 0..{n_texts - 1} per row; got {owner.shape[0]} for "
                         f"{rows.shape[0]} rows")
    if np.any(rows.data < 0) or not np.all(np.isfinite(rows.data)):
        raise ValueError("candidate rows hold finite values > 0 (the table's winner sums)")
    if rows.nnz == 0:
        return sp.csr_matrix((n_texts, dim), dtype=np.float32)
    lengths = np.diff(rows.indptr)
    entry_row = np.repeat(np.arange(rows.shape[0]), lengths)
    top = np.maximum.reduceat(rows.data, rows.indptr[:-1][lengths > 0])  # each non-empty row's largest value
    scaled = rows.data / np.repeat(top, lengths[lengths > 0])
    # the text's column sums of scaled rows, one per (text, dim) key; a token's context leaves itself out
    keys = owner[entry_row].astype(np.int64) * dim + rows.indices
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=scaled, minlength=unique.shape[0])
    score = scaled + vote * (sums[inverse] - scaled)
    order = np.lexsort((rows.indices, -score, entry_row))  # per token: best score first, ties to the lower dim
    rank = np.arange(order.shape[0]) - rows.indptr[entry_row[order]]
    chosen = order[rank < winners]
    return _max_of(score[chosen], owner[entry_row[chosen]], rows.indices[chosen], n_texts, dim)


def _max_of(values: np.ndarray, texts: np.ndarray, dims: np.ndarray, n_texts: int, dim: int) -> sp.csr_matrix:
    """(n_texts, dim) CSR holding the largest of the values given for each (text, dim) (a csr_matrix built from
    duplicates would sum them)."""
    order = np.lexsort((-values, dims, texts))
    texts, dims, values = texts[order], dims[order], values[order]
    first = np.ones(order.shape[0], bool)
    first[1:] = (texts[1:] != texts[:-1]) | (dims[1:] != dims[:-1])
    return sp.csr_matrix((values[first].astype(np.float32), (texts[first], dims[first])), shape=(n_texts, dim))
