import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import DimensionMismatchError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), dim=st.integers(1, 200), n_buckets=st.integers(1, 2),
       density=st.floats(0.0, 0.3), dense_dims=st.integers(0, 5), k=st.integers(1, 400),
       use_deleted=st.booleans(), n_threads=st.sampled_from([None, 1, 2]))
def test_search_encoded_equals_brute_force_top_k(seed, n, dim, n_buckets, density, dense_dims, k, use_deleted,
                                                 n_threads):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    queries = random_encoding(rng, 4, dim, n_buckets, min(1.0, density * 3 + 0.05), dense_dims)
    weights = rng.uniform(0, 2, n_buckets).round(2).tolist()
    deleted = rng.random(n) < 0.3 if use_deleted else None
    index = WeightedIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None)
    for scoring in ("binary", "weighted"):
        got = index.search_encoded(queries, k, weights, scoring, deleted=deleted, n_threads=n_threads)
        assert got[0].dtype == np.int64 and got[1].dtype == np.float64
        assert_same_ranking(got, expected_top_k(docs, queries, k, weights, scoring, deleted))


def test_binary_scores_are_exact_and_ties_go_to_the_lower_doc_number():
    rng = np.random.default_rng(3)
    docs = random_encoding(rng, 500, 64, 2, 0.2, dense_dims=8)
    queries = random_encoding(rng, 6, 64, 2, 0.4)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(500)], None)
    numbers, scores = index.search_encoded(queries, 50, [1.0, 0.5], "binary", n_threads=2)
    want_numbers, want_scores, _ = expected_top_k(docs, queries, 50, [1.0, 0.5], "binary")
    assert np.array_equal(numbers, want_numbers) and np.array_equal(scores, want_scores)
    assert (np.diff(scores, axis=1) <= 0).all()


def test_real_vectors(mini_encoding, mini_data, tiny_encoder_session):
    queries = tiny_encoder_session.encode_query([q.text for q in mini_data.queries], query_k=None)
    weights = [1.0, 0.5]
    index = WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), None)
    for scoring in ("binary", "weighted"):
        for n_threads in (1, 2):
            got = index.search_encoded(queries, 20, weights, scoring, n_threads=n_threads)
            expected = expected_top_k(mini_encoding, queries, 20, weights, scoring)
            assert_same_ranking(got, expected, atol=1e-6)
            assert (got[0][:, 0] >= 0).all()


def test_padding_single_document_and_empty_queries():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 1, 30, 1, 0.5)
    index = WeightedIndex.from_encoding(docs, ["only"], None)
    queries = random_encoding(rng, 3, 30, 1, 0.0)  # no active dims at all
    numbers, scores = index.search_encoded(queries, 10, [1.0], "binary")
    assert numbers.shape == (3, 1) and (numbers == -1).all() and (scores == 0).all()
    numbers, scores = index.search_encoded(docs, 10, [1.0], "binary")
    assert numbers.tolist() == [[0]] and scores.tolist() == [[docs.buckets[0].nnz]]
    numbers, scores = index.search_encoded(docs, 10, [1.0], "binary", deleted=np.array([True]))
    assert numbers.tolist() == [[-1]]
    numbers, scores = index.search_encoded(docs[:0], 10, [1.0], "weighted")
    assert numbers.shape == (0, 1)


def test_bad_arguments_are_named():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 5, 30, 1, 0.5)
    binary = BinaryIndex.from_encoding(docs, [str(i) for i in range(5)], None)
    with pytest.raises(DimensionMismatchError, match="queries have dim=31 but the index has dim=30"):
        binary.search_encoded(random_encoding(rng, 1, 31, 1, 0.5), 3, [1.0], "binary")
    with pytest.raises(DimensionMismatchError, match="2 buckets but the index has 1"):
        binary.search_encoded(random_encoding(rng, 1, 30, 2, 0.5), 3, [1.0, 1.0], "binary")
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        binary.search_encoded(docs, 0, [1.0], "binary")
    with pytest.raises(ValueError, match="2 bucket weights for 1 buckets"):
        binary.search_encoded(docs, 3, [1.0, 2.0], "binary")
    with pytest.raises(ValueError, match="weighted scoring needs a weighted index"):
        binary.search_encoded(docs, 3, [1.0], "weighted")
    with pytest.raises(ValueError, match="scoring='bm25'"):
        binary.search_encoded(docs, 3, [1.0], "bm25")
    with pytest.raises(ValueError, match=r"deleted must be a \(5,\) bool mask"):
        binary.search_encoded(docs, 3, [1.0], "binary", deleted=np.zeros(4, bool))
    with pytest.raises(ValueError, match="n_threads=0 must be a positive integer"):
        binary.search_encoded(docs, 3, [1.0], "binary", n_threads=0)


def test_one_query_is_split_between_threads_only_when_each_gets_enough_documents(monkeypatch):
    from uhdsearch.index.kernels import dispatch

    monkeypatch.setattr(dispatch, "MIN_DOCUMENTS_PER_THREAD", 32_768)  # conftest lowers it for tiny indexes
    assert dispatch.ranges_per_query(1, 2, 10_000_000) == 2
    assert dispatch.ranges_per_query(1, 4, 10_000_000) == 4
    assert dispatch.ranges_per_query(8, 2, 10_000_000) == 1  # many queries: one task per query instead
    assert dispatch.ranges_per_query(1, 2, 65_535) == 1
    assert dispatch.ranges_per_query(1, 2, 65_536) == 2
    assert dispatch.ranges_per_query(1, 1, 10_000_000) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**31))
def test_sort_heaps_orders_like_lexsort(n_q, n_ranges, k, depth, seed):
    """Best `depth` by score desc then doc asc, padding (-1) last: as np.lexsort, the merge it replaced."""
    from uhdsearch.index.kernels.heap import sort_heaps

    rng = np.random.default_rng(seed)
    docs = rng.permutation(1000)[: n_q * n_ranges * k].reshape(n_q, n_ranges * k).astype(np.int64)
    scores = rng.integers(1, 4, docs.shape).astype(np.float64)  # few values: many ties
    pad = rng.random(docs.shape) < 0.3
    docs[pad], scores[pad] = -1, 0.0
    got_docs, got_scores = sort_heaps(docs, scores, depth)
    for q in range(n_q):
        valid = docs[q] >= 0
        order = np.lexsort((docs[q][valid], -scores[q][valid]))[:depth]
        n = order.shape[0]
        assert got_docs[q, :n].tolist() == docs[q][valid][order].tolist()
        assert got_scores[q, :n].tolist() == scores[q][valid][order].tolist()
        assert (got_docs[q, n:] == -1).all() and (got_scores[q, n:] == 0).all()


def test_query_arrays_single_bucket_takes_the_rows_as_they_are():
    """The one-bucket shortcut gives what interleaving the buckets gives."""
    import scipy.sparse as sp

    from uhdsearch.index.kernels import dispatch
    from uhdsearch.sparse import SparseEncoding

    enc = SparseEncoding([sp.random(5, 50, density=0.2, format="csr", random_state=1, dtype=np.float32)])
    got = dispatch.query_arrays(enc, 1)
    want = dispatch.interleave_buckets(enc, 1)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got[0][-1] == enc.buckets[0].nnz > 0
