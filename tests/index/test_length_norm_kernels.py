"""Length-normalized binary scores: document lengths and the kernels against brute force, refusals named."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.sparse import SparseEncoding


def levels_of(rng, queries: SparseEncoding) -> SparseEncoding:
    return SparseEncoding([sp.csr_matrix((rng.integers(1, 16, m.nnz).astype(np.float32), m.indices, m.indptr),
                                         shape=m.shape) for m in queries.buckets])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 600), dim=st.integers(1, 100), n_buckets=st.integers(1, 2),
       density=st.floats(0.0, 0.4), dense_dims=st.integers(0, 6), k=st.integers(1, 40),
       alpha=st.sampled_from([0.25, 0.5, 1.0, 2.0]), quantized=st.booleans(), use_deleted=st.booleans(),
       threads=st.integers(1, 2), bias=st.sampled_from([0.5, 8.0]), unit_weight=st.booleans())
def test_normalized_search_equals_brute_force(seed, n, dim, n_buckets, density, dense_dims, k, alpha, quantized,
                                              use_deleted, threads, bias, unit_weight):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None, bitmap_bias=bias)
    lengths = [np.diff(m.indptr) for m in docs.buckets]
    assert all(index.document_lengths(b).tolist() == lengths[b].tolist() for b in range(n_buckets))
    queries = random_encoding(rng, 6, dim, n_buckets, min(1.0, density * 3 + 0.1), dense_dims)
    scoring = "quantized" if quantized else "binary"
    if quantized:
        queries = levels_of(rng, queries)
    weights = [1.0] * n_buckets if unit_weight else rng.choice([-0.5, 0.0, 0.7, 2.0], n_buckets).tolist()
    deleted = rng.random(n) < 0.2 if use_deleted else None
    got = index.search_encoded(queries, k, weights, scoring, deleted=deleted, n_threads=threads, length_norm=alpha)
    assert_same_ranking(got, expected_top_k(docs, queries, k, weights, scoring, deleted, alpha), atol=0)


def test_the_normalization_turns_the_ranking_toward_short_documents():
    # d0 is active in 20 dims and shares 4 with the query, d1 in 4 dims and shares 3: plain counts rank d0 first,
    # alpha 1 ranks d1 first (3/4 against 4/20), alpha 0.1 keeps d0 (4 x 20^-0.1 = 2.96 > 3 x 4^-0.1 = 2.61).
    rows = np.zeros((2, 32), np.float32)
    rows[0, :20] = 1
    rows[1, [0, 1, 2, 25]] = 1
    docs = SparseEncoding([sp.csr_matrix(rows)])
    query = SparseEncoding([sp.csr_matrix(np.isin(np.arange(32), [0, 1, 2, 3, 30]).astype(np.float32)[None])])
    index = BinaryIndex.from_encoding(docs, ["long", "short"], None)
    numbers, scores = index.search_encoded(query, 2, [1.0], "binary")
    assert numbers.tolist() == [[0, 1]] and scores.tolist() == [[4.0, 3.0]]
    numbers, scores = index.search_encoded(query, 2, [1.0], "binary", length_norm=1.0)
    assert numbers.tolist() == [[1, 0]] and np.allclose(scores, [[0.75, 0.2]], rtol=0, atol=1e-15)
    numbers, scores = index.search_encoded(query, 2, [1.0], "binary", length_norm=0.1)
    assert numbers.tolist() == [[0, 1]] and np.allclose(scores, [[4 * 20 ** -0.1, 3 * 4 ** -0.1]])


def test_a_segmented_index_normalizes_each_document_by_its_own_length(tmp_path):
    rng = np.random.default_rng(5)
    docs = random_encoding(rng, 150, 50, 2, 0.15, 4)
    queries = random_encoding(rng, 5, 50, 2, 0.4)
    index = SegmentedIndex.create(tmp_path / "live", "binary", 50, 2)
    index.add(docs[:80], [f"a{i}" for i in range(80)])
    index.commit()
    index.add(docs[80:130], [f"b{i}" for i in range(50)])
    index.commit()
    index.delete([f"a{i}" for i in range(0, 80, 4)] + ["b7"])
    index.add(docs[130:], [f"c{i}" for i in range(20)])  # uncommitted additions are searched too
    deleted = np.array([d is None for d in index.doc_ids])
    assert deleted.sum() == 21
    got = index.search_encoded(queries, 12, [1.0, 0.5], "binary", length_norm=0.5)
    assert_same_ranking(got, expected_top_k(docs, queries, 12, [1.0, 0.5], "binary", deleted, 0.5), atol=0)
    scale, word_max, _, _ = index.length_scales(0.5)[1]
    assert np.allclose(scale, np.maximum(np.diff(docs.buckets[1].indptr), 1) ** -0.5)
    assert word_max.shape == (3,) and word_max[0] == scale[:64].max()


def test_bad_length_norms_are_named():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 20, 16, 1, 0.3)
    binary = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(20)], None)
    weighted = WeightedIndex.from_encoding(docs, [f"d{i}" for i in range(20)], None)
    for bad in (-0.1, 2.5, float("nan"), "0.3", True):
        with pytest.raises(UsageError, match="length_norm="):
            binary.search_encoded(docs[:1], 3, [1.0], "binary", length_norm=bad)
    with pytest.raises(UsageError, match="weighted scoring already uses L2-normalized"):
        weighted.search_encoded(docs[:1], 3, [1.0], "weighted", length_norm=0.3)
    # weighted scoring without it, and binary scoring of a weighted index with it, work
    assert weighted.search_encoded(docs[:1], 3, [1.0], "weighted")[0].shape == (1, 3)
    numbers, scores = weighted.search_encoded(docs[:1], 3, [1.0], "binary", length_norm=0.3)
    want = brute_force_scores(docs, docs[:1], [1.0], "binary", 0.3)[0]
    assert np.allclose(scores[0], np.sort(want)[::-1][:3], rtol=0, atol=0)
