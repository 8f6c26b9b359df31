"""Ranking comparisons shared by the SegmentedIndex tests."""
from __future__ import annotations

import numpy as np


def ranking(index, queries, weights, scoring, k=10_000):
    """Per query, the (doc_id, score) list of the top k (default: the whole ranking), best first."""
    numbers, scores = index.search_encoded(queries, k, weights, scoring)
    ids = index.doc_ids
    for row_n, row_s in zip(numbers, scores):
        hits = row_n[row_n >= 0]
        # The tie rule: score descending, then (global) doc number ascending.
        assert all((a_s > b_s) or (a_s == b_s and a_n < b_n)
                   for a_n, b_n, a_s, b_s in zip(hits, hits[1:], row_s, row_s[1:]))
    return [[(ids[n], float(s)) for n, s in zip(row_n, row_s) if n >= 0] for row_n, row_s in zip(numbers, scores)]


def assert_same_ranking(got, want, exact):
    """Exact equality for counts (binary scoring); for float dot products, the same documents with scores
    equal to 1e-9 relative: kernels may sum a document's products in another order when the postings
    layout differs (a segment against a fresh build), so only near-tied documents may swap places."""
    if exact:
        assert got == want
        return
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g_scores, w_scores = dict(g), dict(w)
        assert g_scores.keys() == w_scores.keys()
        keys = list(w_scores)
        assert np.allclose([g_scores[d] for d in keys], [w_scores[d] for d in keys], rtol=1e-9, atol=0)
