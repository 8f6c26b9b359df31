"""Long packed lists counted as bitmap rows built per chunk (kernels/lists.py, ranges._list_row_slots): which
lists qualify, their slots by weight level, and searches mixing row lists, posting-by-posting lists and stored
bitmaps against brute force."""
import numpy as np
import pytest
import scipy.sparse as sp

from tests.index.index_oracle import assert_same_ranking, expected_top_k
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.kernels.lists import ROW_LIST_MIN, ROW_LIST_SHARE, counted_as_row
from uhdsearch.index.kernels.ranges import _list_row_slots
from uhdsearch.sparse import SparseEncoding


def test_a_list_is_a_row_from_64_postings_and_one_per_2048_documents():
    assert (ROW_LIST_MIN, ROW_LIST_SHARE) == (64, 2048)
    assert not counted_as_row(63, 1_000) and counted_as_row(64, 1_000)
    assert not counted_as_row(64, 200_000) and counted_as_row(98, 200_000)  # 97 x 2048 < 200,000 <= 98 x 2048


def test_row_slots_follow_the_weight_levels():
    indptr = np.array([0, 100, 110, 300, 400, 500])  # dims 0..4: 100, 10, 190, 100, 100 postings
    rows = np.array([-1, -1, -1, 0, -1], np.int32)  # dim 3 is a stored bitmap
    qdims = np.array([0, 1, 2, 3, 4])
    qvals = np.array([3.0, 1.0, 1.0, 2.0, 2.0], np.float32)
    slots, level_ptr = np.full(5, -1, np.int64), np.zeros(16, np.int64)
    end = _list_row_slots(indptr, rows, qdims, qvals, 0, 5, 0, True, 1_000, 7, 16, slots, level_ptr)
    # rows: dims 0 (level 3), 2 (level 1), 4 (level 2); dim 1 is too short, dim 3 a bitmap; slots from 7, by level
    assert end == 10 and slots.tolist() == [9, -1, 7, -1, 8]
    assert level_ptr[:5].tolist() == [0, 1, 2, 3, 3] and level_ptr[15] == 3
    slots[:], level_ptr[:] = -1, 0
    assert _list_row_slots(indptr, rows, qdims, qvals, 0, 5, 0, False, 1_000, 0, 16, slots, level_ptr) == 3
    assert slots.tolist() == [0, -1, 1, -1, 2] and level_ptr[1] == 3  # binary: every row at level 1
    slots[:], level_ptr[:] = -1, 0  # at most 2 rows: the two longest lists (dim 2, then dim 0 before dim 4)
    assert _list_row_slots(indptr, rows, qdims, qvals, 0, 5, 0, False, 1_000, 0, 2, slots, level_ptr) == 2
    assert slots.tolist() == [0, -1, 1, -1, -1]


@pytest.mark.parametrize("scoring, alpha", [("binary", 0.0), ("quantized", 0.0), ("binary", 0.5),
                                            ("quantized", 0.5)])
def test_searches_mixing_row_lists_short_lists_and_bitmaps_equal_brute_force(scoring, alpha):
    rng = np.random.default_rng(7)
    n, dim = 3_000, 12
    shares = [0.3, 0.15, 0.05, 0.03, 0.01, 0.005, 0.6, 0.4, 0.02, 0.002, 0.08, 0.5]  # 3,000 docs: 6 .. 1,800 each
    dense = np.stack([rng.random(n) < s for s in shares], axis=1)
    docs = SparseEncoding([sp.csr_matrix(dense.astype(np.float32))])
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None, bitmap_bias=1.0)
    c = index.buckets[0]
    df = np.diff(np.asarray(c.indptr))
    lists = np.asarray(c.bitmap_rows) < 0
    assert lists.sum() >= 3 and (np.asarray(c.bitmap_rows) >= 0).sum() >= 2  # both kinds stored
    as_rows = [counted_as_row(int(x), n) for x in df]
    assert any(lists & as_rows) and any(lists & ~np.array(as_rows))  # both kinds of list
    queries = SparseEncoding([sp.csr_matrix((rng.random((8, dim)) < 0.6).astype(np.float32))])
    if scoring == "quantized":
        q = queries.buckets[0]
        queries = SparseEncoding([sp.csr_matrix((rng.integers(1, 16, q.nnz).astype(np.float32), q.indices,
                                                 q.indptr), shape=q.shape)])
    got = index.search_encoded(queries, 25, [1.0], scoring, n_threads=1, length_norm=alpha)
    assert_same_ranking(got, expected_top_k(docs, queries, 25, [1.0], scoring, None, alpha), atol=0)


@pytest.mark.parametrize("scoring", ["binary", "quantized", "weighted"])
def test_many_row_lists_across_ranges_and_deletions_equal_brute_force(scoring):
    # 400 list dims of ~50 % of 5,000 documents: more rows per level than one carry-save group, counts past plane 8,
    # two threads splitting the documents of one query, deleted documents; weighted scoring keeps its own path
    rng = np.random.default_rng(3)
    n, dim = 5_000, 400
    docs = SparseEncoding([sp.csr_matrix((rng.random((n, dim)) < 0.5).astype(np.float32)
                                         * rng.random((n, dim)).astype(np.float32))])
    index = (WeightedIndex if scoring == "weighted" else BinaryIndex).from_encoding(
        docs, [f"d{i}" for i in range(n)], None, bitmap_bias=0.01)
    assert (np.asarray(index.buckets[0].bitmap_rows) < 0).all()  # every dim a packed list, each a row
    q = sp.csr_matrix((rng.random((1, dim)) < 0.9).astype(np.float32))
    if scoring == "quantized":
        q.data = rng.integers(1, 16, q.nnz).astype(np.float32)
    elif scoring == "weighted":
        q.data = rng.random(q.nnz).astype(np.float32)
    queries = SparseEncoding([q])
    deleted = rng.random(n) < 0.1
    target = docs if scoring == "weighted" else docs.binarize()
    got = index.search_encoded(queries, 30, [1.0], scoring, deleted=deleted, n_threads=2)
    assert_same_ranking(got, expected_top_k(target, queries, 30, [1.0], scoring, deleted, 0.0), atol=1e-9)
