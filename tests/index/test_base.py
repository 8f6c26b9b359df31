"""index/base.py: both indexes meet the SearchableIndex protocol, share one argument check, and read hits alike."""
from __future__ import annotations

import numpy as np
import pytest

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import DimensionMismatchError
from uhdsearch.index.base import SearchableIndex, hits_per_query
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.sparse import SparseEncoding


@pytest.fixture()
def indexes(tmp_path):
    rng = np.random.default_rng(3)
    docs = random_encoding(rng, 40, 64, 2, 0.2, dense_dims=4)
    ids = [f"d{i}" for i in range(docs.n)]
    static = WeightedIndex.from_encoding(docs, ids, None)
    live = SegmentedIndex.create(tmp_path / "live", "weighted", 64, 2)
    live.add(docs[:25], ids[:25])
    live.commit()
    live.add(docs[25:], ids[25:])  # uncommitted: a second part
    yield docs, static, live
    live.commit()
    live.close()


def test_both_indexes_are_searchable_indexes(indexes):
    _, static, live = indexes
    assert isinstance(static, SearchableIndex) and isinstance(live, SearchableIndex)
    assert not isinstance(object(), SearchableIndex)
    for index in (static, live):
        assert (index.dim, index.n_buckets, index.variant, index.n_documents) == (64, 2, "weighted", 40)


@pytest.mark.parametrize("scoring", ["binary", "weighted"])
def test_hits_per_query_read_both_indexes_alike(indexes, scoring):
    docs, static, live = indexes
    queries = random_encoding(np.random.default_rng(4), 5, 64, 2, 0.1)
    expected = expected_top_k(docs, queries, 12, [1.0, 0.5], scoring)
    got = [index.search_encoded(queries, 12, [1.0, 0.5], scoring) for index in (static, live)]
    for numbers_scores in got:
        assert_same_ranking(numbers_scores, expected)
    hits = [hits_per_query(*numbers_scores, index.doc_ids) for numbers_scores, index in zip(got, (static, live))]
    assert sum(map(len, hits[0])) > 5 and hits[0] == hits[1]  # same kernel, same tie rule: the same (doc_id, score) lists
    numbers, scores = got[0]
    for row, row_hits in enumerate(hits[0]):
        n = int((numbers[row] >= 0).sum())
        assert row_hits == [(f"d{d}", float(s)) for d, s in zip(numbers[row, :n], scores[row, :n])]


def test_hits_per_query_drops_padding_and_keeps_order():
    numbers = np.array([[4, 1, -1], [-1, -1, -1], [0, 2, 3]])
    scores = np.array([[2.5, 2.5, 0.0], [0.0, 0.0, 0.0], [3.0, 2.0, 1.0]])
    ids = ["a", "b", "c", "d", "e"]
    assert hits_per_query(numbers, scores, ids) == [[("e", 2.5), ("b", 2.5)], [], [("a", 3.0), ("c", 2.0), ("d", 1.0)]]
    assert hits_per_query(np.zeros((2, 0), np.int64), np.zeros((2, 0)), ids) == [[], []]


@pytest.mark.parametrize("which", ["static", "live"])
def test_one_argument_check_for_both(indexes, which):
    docs, static, live = indexes
    index = static if which == "static" else live
    with pytest.raises(DimensionMismatchError, match="the queries have 1 buckets but the index has 2"):
        index.search_encoded(SparseEncoding(docs.buckets[:1]), 3, [1.0, 1.0], "binary")
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        index.search_encoded(docs[:1], 0, [1.0, 1.0], "binary")
    with pytest.raises(ValueError, match="deleted must be a \\(40,\\) bool mask"):
        index.search_encoded(docs[:1], 3, [1.0, 1.0], "binary", deleted=np.zeros(39, bool))
    binary = BinaryIndex.from_encoding(docs, static.doc_ids, None)
    with pytest.raises(ValueError, match="weighted scoring needs a weighted index"):
        binary.search_encoded(docs[:1], 3, [1.0, 1.0], "weighted")

