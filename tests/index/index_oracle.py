"""Helpers shared by the index tests: random encodings and the exact top-k expected from brute force."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.sparse import SparseEncoding


def random_encoding(rng, n, dim, n_buckets, density, dense_dims=0):
    """Random vectors; the first `dense_dims` dims are active in about 60% of rows (they become bitmaps)."""
    buckets = []
    for _ in range(n_buckets):
        m = sp.random(n, dim, density=density, format="lil", dtype=np.float32, random_state=rng,
                      data_rvs=lambda k: rng.uniform(0.01, 1, k))
        if dense_dims and n:
            mask = rng.random((n, min(dense_dims, dim))) < 0.6
            m[:, :min(dense_dims, dim)] = mask * rng.uniform(0.01, 1, mask.shape).astype(np.float32)
        buckets.append(sp.csr_matrix(m))
    return SparseEncoding(buckets)


def expected_top_k(documents, queries, k, weights, scoring, deleted=None, length_norm=0.0):
    """(numbers, scores) padded like InvertedIndex.search_encoded, from the brute-force oracle."""
    oracle = brute_force_scores(documents, queries, weights, scoring, length_norm)
    depth = min(k, documents.n)
    numbers = np.full((queries.n, depth), -1, np.int64)
    scores = np.zeros((queries.n, depth))
    for row in range(queries.n):
        keep = np.flatnonzero(oracle[row] > 0)
        if deleted is not None:
            keep = keep[~deleted[keep]]
        top = keep[np.lexsort((keep, -oracle[row, keep]))][:depth]  # score desc, then doc number asc
        numbers[row, :len(top)] = top
        scores[row, :len(top)] = oracle[row, top]
    return numbers, scores, oracle


def assert_same_ranking(got, expected, atol=1e-9):
    """Equal numbers and scores; where float rounding could swap near-ties, accept either order."""
    numbers, scores = got
    want_numbers, want_scores, oracle = expected
    assert numbers.shape == want_numbers.shape and scores.shape == want_scores.shape
    assert np.allclose(scores, want_scores, atol=atol, rtol=0)
    for row in range(numbers.shape[0]):
        if not np.array_equal(numbers[row], want_numbers[row]):
            # only ties within rounding may differ: the returned docs must carry the oracle's scores
            hits = numbers[row] >= 0
            assert np.allclose(oracle[row, numbers[row, hits]], scores[row, hits], atol=atol, rtol=0)
            assert np.array_equal(hits, want_numbers[row] >= 0)
