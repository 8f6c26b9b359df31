"""Random documents and ranking comparisons shared by the SegmentedIndex tests."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.sparse import SparseEncoding

DIM, N_BUCKETS = 60, 2
WEIGHTS = [1.0, 0.5]


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


def random_encoding(rng, n, dim=DIM, n_buckets=N_BUCKETS, density=0.15):
    return SparseEncoding([sp.random(n, dim, density=density, format="csr", dtype=np.float32, random_state=rng,
                                     data_rvs=lambda size: rng.uniform(0.01, 1, size)) for _ in range(n_buckets)])


def live_ids(index):
    return [d for d in index.doc_ids if d is not None]


def assert_equals_fresh_build(index, expected, queries):
    """`index` holds exactly the documents of `expected` (doc_id -> one-row encoding) and ranks like a fresh
    build whose document order is the index's live order (the tie rule orders by doc number)."""
    order = live_ids(index)
    assert sorted(order) == sorted(expected)
    assert index.n_documents == len(expected)
    if not expected:
        numbers, scores = index.search_encoded(queries, 5, WEIGHTS, "binary")
        assert numbers.shape == (queries.n, 0)
        return
    klass = WeightedIndex if index.variant == "weighted" else BinaryIndex
    fresh = klass.from_encoding(SparseEncoding.concat([expected[d] for d in order]), order, None)
    for scoring in ("binary", "weighted") if index.variant == "weighted" else ("binary",):
        got, want = ranking(index, queries, WEIGHTS, scoring), ranking(fresh, queries, WEIGHTS, scoring)
        assert_same_ranking(got, want, exact=scoring == "binary")
        assert any(want)
        # A short head checks the merge of per-segment top-k lists, ties on the cut included.
        assert ranking(index, queries, WEIGHTS, scoring, k=3) == [r[:3] for r in got]
    for b in range(N_BUCKETS):
        assert np.array_equal(index.document_frequencies(b), fresh.document_frequencies(b))


def random_add(index, rng, expected, next_id):
    """Add 1-7 random documents d<next_id>...; record them in `expected`; return the next free id number."""
    n = int(rng.integers(1, 8))
    encoding = random_encoding(rng, n)
    ids = [f"d{next_id + i}" for i in range(n)]
    index.add(encoding, ids)
    expected.update({d: encoding[[i]] for i, d in enumerate(ids)})
    return next_id + n


def random_delete(index, rng, expected):
    """Delete 1-5 random live documents, checking the returned count; drop them from `expected`."""
    gone = list(rng.choice(sorted(expected), size=int(rng.integers(1, min(6, len(expected)) + 1)), replace=False))
    assert index.delete(gone) == len(gone)
    for d in gone:
        del expected[d]
