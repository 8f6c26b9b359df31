"""overlap_counts (the cascade's second pass) against brute-force overlaps, on bitmaps and packed lists."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import random_encoding
from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.forward import ForwardStore
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.sparse import SparseEncoding


def brute_force_counts(docs: SparseEncoding, query: SparseEncoding, numbers, values: bool) -> np.ndarray:
    out = []
    for d, q in zip(docs.buckets, query.buckets):
        q = q.copy()
        if not values:
            q.data[:] = 1
        out.append((d.astype(bool).astype(np.float64) @ q.T.astype(np.float64)).toarray().ravel()[numbers])
    return np.array(out, np.int64)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 700), dim=st.integers(1, 120), n_buckets=st.integers(1, 2),
       density=st.floats(0.0, 0.4), dense_dims=st.integers(0, 6), n_numbers=st.integers(0, 60),
       bias=st.sampled_from([0.5, 8.0]))
def test_counts_equal_brute_force_for_any_numbers(seed, n, dim, n_buckets, density, dense_dims, n_numbers, bias):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None, bitmap_bias=bias)
    query = random_encoding(rng, 1, dim, n_buckets, min(1.0, density * 3 + 0.1), dense_dims)
    numbers = rng.integers(0, n, n_numbers)  # unsorted, with repeats
    levels = SparseEncoding([sp.csr_matrix((rng.integers(1, 16, m.nnz).astype(np.float32), m.indices, m.indptr),
                                           shape=m.shape) for m in query.buckets])
    for share in (None, 1e-9, 0.2):  # probes alone, then doc-major rows of the dims above a share, probes for the rest
        if share is not None:
            index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None, bitmap_bias=bias)
            index.keep_forward(share)
        assert np.array_equal(index.overlap_counts(query, numbers), brute_force_counts(docs, query, numbers, False))
        assert np.array_equal(index.overlap_counts(levels, numbers, quantized=True),
                              brute_force_counts(docs, levels, numbers, True))


@pytest.mark.parametrize("n", [1, 63, 513, 5_000])
def test_forward_rows_are_the_transpose_of_the_bitmaps(n):
    # 512-document transpose blocks split over two threads; n not a multiple of 64 leaves the last word short
    rng = np.random.default_rng(n)
    docs = random_encoding(rng, n, 90, 1, 0.3, dense_dims=20)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None, bitmap_bias=8.0)
    store = ForwardStore.build(index.buckets[0], n, min_count=n // 10, n_threads=2)
    frequencies = index.document_frequencies(0)
    bitmap = index.buckets[0].bitmap_rows >= 0
    assert store.dims.tolist() == np.flatnonzero(bitmap & (frequencies > n // 10)).tolist()
    assert (store.column[store.dims] == np.arange(store.dims.shape[0])).all()
    assert (store.column[np.setdiff1d(np.arange(90), store.dims)] == -1).all()
    bits = np.unpackbits(store.rows.view(np.uint8), axis=1, bitorder="little")[:, :store.dims.shape[0]]
    dense = docs.buckets[0].toarray() > 0
    assert np.array_equal(bits.astype(bool), dense[:, store.dims])
    assert store.rows.flags.writeable is False and store.dims.shape[0] > 5


def test_long_lists_seek_the_right_block():
    # One dim with 3,000 postings (24 packed blocks) and one stored as a bitmap; the numbers fall in many blocks,
    # before the first posting and after the last.
    n = 100_000
    rng = np.random.default_rng(7)
    listed = np.sort(rng.choice(np.arange(10, n - 10), 3000, replace=False))
    half = np.flatnonzero(rng.random(n) < 0.5)
    rows = np.concatenate([listed, half])
    cols = np.concatenate([np.zeros(listed.shape[0], np.int64), np.ones(half.shape[0], np.int64)])
    docs = SparseEncoding([sp.csr_matrix((np.ones(rows.shape[0], np.float32), (rows, cols)), shape=(n, 2))])
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=1.0)
    assert index.buckets[0].bitmap_rows.tolist() == [-1, 0]
    numbers = np.concatenate([[0, 5, n - 1], listed[::37], listed[::41] + 1, rng.integers(0, n, 200)])
    query = SparseEncoding([sp.csr_matrix(np.array([[1.0, 1.0]], np.float32))])
    want = np.isin(numbers, listed).astype(np.int64) + np.isin(numbers, half)
    assert (want == 0).sum() > 20 and (want == 1).sum() > 50 and (want == 2).sum() > 20
    assert index.overlap_counts(query, numbers)[0].tolist() == want.tolist()


def test_a_segmented_index_counts_by_global_number(tmp_path):
    rng = np.random.default_rng(3)
    docs = random_encoding(rng, 9, 40, 2, 0.3, dense_dims=3)
    index = SegmentedIndex.create(tmp_path / "x", "binary", 40, 2)
    index.add(docs[:4], [f"a{i}" for i in range(4)])
    index.commit()
    index.add(docs[4:], [f"b{i}" for i in range(5)])  # uncommitted: the additions are a part too
    query = random_encoding(rng, 1, 40, 2, 0.5)
    numbers = np.array([8, 0, 5, 3])
    assert np.array_equal(index.overlap_counts(query, numbers), brute_force_counts(docs, query, numbers, False))


def test_bad_arguments_are_named():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 5, 10, 1, 0.5)
    index = BinaryIndex.from_encoding(docs, list("abcde"), None)
    with pytest.raises(UsageError, match=r"\[0, 5\)"):
        index.overlap_counts(docs[:1], np.array([0, 5]))
    with pytest.raises(DimensionMismatchError, match="one query row"):
        index.overlap_counts(docs[:2], np.array([0]))
    with pytest.raises(DimensionMismatchError, match="dim=11"):
        index.overlap_counts(random_encoding(rng, 1, 11, 1, 0.5), np.array([0]))
    with pytest.raises(UsageError, match="1-D array"):
        index.overlap_counts(docs[:1], np.array([0.5]))
    with pytest.raises(UsageError, match="integer query values"):
        index.overlap_counts(docs[:1], np.array([0]), quantized=True)
    assert index.overlap_counts(docs[:1], np.zeros(0, np.int64)).shape == (1, 0)


def test_the_store_is_built_once_after_enough_queries_and_not_pickled():
    import pickle

    rng = np.random.default_rng(11)
    docs = random_encoding(rng, 300, 60, 1, 0.3, dense_dims=10)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(300)], None, bitmap_bias=8.0)
    query = random_encoding(rng, 1, 60, 1, 0.6, dense_dims=10)
    numbers = np.arange(0, 300, 7)
    want = brute_force_counts(docs, query, numbers, False)
    index.keep_forward(0.2, n_queries=3, after=5)  # 3 query rows of 5: not yet
    assert index._forward.stores == [None]
    index.keep_forward(0.2, n_queries=3, after=5)
    built = index._forward.stores[0]
    assert built is not None and built.min_count == 60
    index.keep_forward(0.01)  # never rebuilt for another share: dims it lacks are probed
    assert index._forward.stores[0] is built
    assert np.array_equal(index.overlap_counts(query, numbers), want)
    copy = pickle.loads(pickle.dumps(index))  # the derived rows stay behind; counts are the same
    assert copy._forward.stores == [None]
    assert np.array_equal(copy.overlap_counts(query, numbers), want)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(UsageError, match="max_share"):
            index.keep_forward(bad)
