"""Quantized scoring (integer query weights over binary documents) against the brute-force oracle."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.kernels import ranges
from uhdsearch.index.kernels.levels import MAX_LEVEL
from uhdsearch.sparse import SparseEncoding

ALL_LISTS, ALL_BITMAPS = 1e-9, 1e30


def with_levels(rng, queries, top, choices=None):
    """The same dims with random integer values in 1..top (or drawn from `choices`)."""
    def draw(size):
        return rng.choice(choices, size) if choices is not None else rng.integers(1, top + 1, size)
    return SparseEncoding([sp.csr_matrix((draw(m.nnz).astype(np.float32), m.indices, m.indptr), shape=m.shape)
                           for m in queries.buckets])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 400), dim=st.integers(1, 60), n_buckets=st.integers(1, 2),
       density=st.floats(0.0, 0.4), dense_dims=st.integers(0, 20), k=st.integers(1, 500), top=st.integers(1, MAX_LEVEL),
       bias=st.sampled_from([ALL_LISTS, 1.0, ALL_BITMAPS]), n_threads=st.sampled_from([1, 2]),
       use_deleted=st.booleans())
def test_quantized_equals_brute_force(seed, n, dim, n_buckets, density, dense_dims, k, top, bias, n_threads,
                                      use_deleted):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    queries = with_levels(rng, random_encoding(rng, 3, dim, n_buckets, min(1.0, 2 * density + 0.1), dense_dims), top)
    weights = rng.uniform(-0.5, 2, n_buckets).round(2).tolist()
    deleted = rng.random(n) < 0.3 if use_deleted else None
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=bias)
    got = index.search_encoded(queries, k, weights, "quantized", deleted=deleted, n_threads=n_threads)
    assert_same_ranking(got, expected_top_k(docs, queries, k, weights, "quantized", deleted))


@pytest.mark.parametrize("choices", [None, [1, 9], [15]])
def test_quantized_across_chunks_with_many_bitmaps(choices):
    """More than one kernel chunk and (with two or one levels) more than 15 bitmap dims per level: the adder's
    full groups and short groups, at every shift."""
    rng = np.random.default_rng(3)
    n = ranges.CHUNK + 777
    docs = random_encoding(rng, n, 64, 1, 0.002, dense_dims=40)
    queries = with_levels(rng, random_encoding(rng, 4, 64, 1, 0.9, dense_dims=40), 7, choices)
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(n)], None)
    got = index.search_encoded(queries, 50, [1.0], "quantized", n_threads=2)
    assert_same_ranking(got, expected_top_k(docs, queries, 50, [1.0], "quantized"))
    assert got[1][0, 0] > 40  # level weights, not counts: more than the number of dims


@pytest.mark.parametrize("scoring", ["binary", "quantized"])
def test_hundreds_of_bitmap_dims_fill_the_deferred_carries(scoring):
    """400 bitmap dims in one query: more than 15 groups per weight, so the adder's deferred carries fill up,
    flush and ripple past plane 8 (counts up to ~4,000) in the middle of a chunk and at its end."""
    rng = np.random.default_rng(7)
    n, dim = 300, 400
    docs = SparseEncoding([sp.csr_matrix((rng.random((n, dim)) < 0.7).astype(np.float32))])
    query = SparseEncoding([sp.csr_matrix(np.ones((2, dim), np.float32))])
    if scoring == "quantized":
        query = with_levels(rng, query, MAX_LEVEL)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=ALL_BITMAPS)
    got = index.search_encoded(query, 40, [1.0], scoring, n_threads=1)
    assert_same_ranking(got, expected_top_k(docs, query, 40, [1.0], scoring))
    assert got[1][0, 0] > (2_000 if scoring == "quantized" else 256)


def test_level_one_equals_binary():
    rng = np.random.default_rng(5)
    docs = random_encoding(rng, 300, 40, 1, 0.1, dense_dims=10)
    queries = random_encoding(rng, 5, 40, 1, 0.3, dense_dims=10)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(300)], None)
    binary = index.search_encoded(queries, 20, [1.0], "binary")
    quantized = index.search_encoded(queries.binarize(), 20, [1.0], "quantized")
    assert np.array_equal(binary[0], quantized[0]) and np.array_equal(binary[1], quantized[1])


def test_each_weight_bit_lands_on_its_plane():
    """One bitmap dim per weight 1..15 (and lists beside them): every document's score is the sum of its dims'
    weights, so a wrong shift, a lost carry or a level read twice changes the scores."""
    n, dim = 700, 15
    rng = np.random.default_rng(11)
    dense = (rng.random((n, dim)) < 0.6).astype(np.float32)
    docs = SparseEncoding([sp.csr_matrix(dense)])
    query = SparseEncoding([sp.csr_matrix(np.arange(1, dim + 1, dtype=np.float32)[None, :])])
    for bias in (ALL_BITMAPS, ALL_LISTS):
        index = BinaryIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=bias)
        numbers, scores = index.search_encoded(query, n, [1.0], "quantized")
        expected = dense @ np.arange(1, dim + 1)
        found = numbers[0] >= 0
        assert found.sum() == (expected > 0).sum() and np.array_equal(scores[0, found], expected[numbers[0, found]])
        assert scores[0, 0] == expected.max() and scores[0, 0] > 80  # most docs share most dims: weights, not counts


@pytest.mark.parametrize("bad", [0.5, 0.0, 16.0, -1.0])
def test_quantized_rejects_non_integer_levels(bad):
    index = BinaryIndex.from_encoding(SparseEncoding([sp.csr_matrix(np.ones((2, 3), np.float32))]), ["a", "b"], None)
    query = SparseEncoding([sp.csr_matrix(np.array([[bad, 1, 0]], np.float32))])
    if bad == 0.0:  # an explicit zero is not an active dim: the query is the plain dim-1 query
        query.buckets[0].eliminate_zeros()
        assert index.search_encoded(query, 2, [1.0], "quantized")[1].tolist() == [[1.0, 1.0]]
        return
    with pytest.raises(UsageError, match="integer query values"):
        index.search_encoded(query, 2, [1.0], "quantized")
