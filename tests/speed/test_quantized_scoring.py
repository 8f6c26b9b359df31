"""Quantized scoring (integer query weights over binary documents) against the brute-force oracle."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from index_oracle import assert_same_ranking, expected_top_k, random_encoding

from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.kernels import ranges
from uhdsearch.index.kernels.levels import MAX_LEVEL, level_arrays, level_weights
from uhdsearch.sparse import SparseEncoding

ALL_LISTS, ALL_BITMAPS = 1e-9, 1e30


def with_levels(rng, queries, top):
    """The same dims with random integer values in 1..top."""
    return SparseEncoding([sp.csr_matrix((rng.integers(1, top + 1, m.nnz).astype(np.float32), m.indices, m.indptr),
                                         shape=m.shape) for m in queries.buckets])


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


def test_quantized_across_chunks_with_many_bitmaps():
    """More than one kernel chunk and more than 15 bitmap dims per level (the adder's full groups)."""
    rng = np.random.default_rng(3)
    n = ranges.CHUNK + 777
    docs = random_encoding(rng, n, 64, 1, 0.002, dense_dims=40)
    queries = with_levels(rng, random_encoding(rng, 4, 64, 1, 0.9, dense_dims=40), 7)
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(n)], None)
    got = index.search_encoded(queries, 50, [1.0], "quantized", n_threads=2)
    assert_same_ranking(got, expected_top_k(docs, queries, 50, [1.0], "quantized"))
    assert got[1][0, 0] > 40  # level weights, not counts: more than the number of dims


def test_level_one_equals_binary():
    rng = np.random.default_rng(5)
    docs = random_encoding(rng, 300, 40, 1, 0.1, dense_dims=10)
    queries = random_encoding(rng, 5, 40, 1, 0.3, dense_dims=10)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(300)], None)
    binary = index.search_encoded(queries, 20, [1.0], "binary")
    quantized = index.search_encoded(queries.binarize(), 20, [1.0], "quantized")
    assert np.array_equal(binary[0], quantized[0]) and np.array_equal(binary[1], quantized[1])


def test_level_arrays_group_dims_by_bucket_and_level():
    m = sp.csr_matrix(np.array([[3, 0, 1, 3], [0, 1, 0, 0]], np.float32))
    qptr, qdims, qvals = level_arrays(SparseEncoding([m, m[::-1]]))
    assert qptr.shape == (2 * 2 * MAX_LEVEL + 1,)
    groups = [qdims[qptr[i]:qptr[i + 1]].tolist() for i in range(qptr.shape[0] - 1)]
    # query 0: bucket 0 level 1 -> [2], level 3 -> [0, 3]; bucket 1 (row [0,1,0,0]) level 1 -> [1]
    assert groups[0] == [2] and groups[2] == [0, 3] and groups[MAX_LEVEL] == [1]
    assert sum(map(len, groups)) == 2 * m.nnz and set(qvals.tolist()) == {1.0}
    sources, weights = level_weights([2.0, 0.5])
    assert sources[MAX_LEVEL] == 1 and weights[2] == 6.0 and weights[MAX_LEVEL + 1] == 1.0


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
