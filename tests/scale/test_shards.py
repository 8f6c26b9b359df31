"""Sharded search on Ray actors equals the unsharded index, query for query, for k in {1, 10, 1000}."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray")

from uhdsearch.errors import UsageError  # noqa: E402
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex  # noqa: E402
from uhdsearch.scale.shards import ShardedIndex, split_index  # noqa: E402
from uhdsearch.search.searcher import Searcher  # noqa: E402


@pytest.mark.parametrize("klass", [BinaryIndex, WeightedIndex])
def test_sharded_search_equals_unsharded_search(ray_cluster, klass, tiny_encoder_session, mini_encoding, mini_data,
                                                tmp_path):
    index = klass.from_encoding(mini_encoding, list(mini_data.corpus), tmp_path / "whole",
                                tiny_encoder_session.digest())
    dirs = split_index(index, 3, tmp_path / "shards")
    assert [InvertedIndex.load(d).n_documents for d in dirs] == [133, 134, 133]
    sharded = ShardedIndex(dirs)
    try:
        assert sharded.doc_ids == index.doc_ids
        assert np.array_equal(sharded.document_frequencies(1), index.document_frequencies(1))
        for k in (1, 10, 1000):
            expected = Searcher(tiny_encoder_session, index).search(mini_data.queries, k=k)
            got = Searcher(tiny_encoder_session, sharded).search(mini_data.queries, k=k)
            assert len(expected.results) == 40 and sum(map(len, expected.results.values())) >= 40 * min(k, 2)
            assert got.results == expected.results
    finally:
        sharded.close()


def test_binary_ties_across_shards_break_by_doc_number(ray_cluster, tiny_encoder_session, mini_encoding, mini_data,
                                                       tmp_path):
    index = BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), None)
    sharded = ShardedIndex(split_index(index, 2, tmp_path / "shards"))
    try:
        queries = mini_encoding[:20]  # documents as queries: many equal binary scores
        weights = [1.0] * index.n_buckets
        numbers, scores = sharded.search_encoded(queries, 50, weights, "binary")
        expected = index.search_encoded(queries, 50, weights, "binary")
        assert np.array_equal(numbers, expected[0]) and np.array_equal(scores, expected[1])
        tied = [(s[:-1] == s[1:]) & (n[:-1] >= 0) for n, s in zip(numbers, scores)]
        assert sum(t.sum() for t in tied) > 0
        assert all((n[:-1][t] < n[1:][t]).all() for n, t in zip(numbers, tied))
    finally:
        sharded.close()


def test_more_shards_than_documents_is_refused(tiny_encoder_session, mini_encoding, mini_data, tmp_path):
    index = BinaryIndex.from_encoding(mini_encoding[:3], list(mini_data.corpus)[:3], None)
    with pytest.raises(UsageError, match="n_shards=4 is more than the index's 3 documents"):
        split_index(index, 4, tmp_path / "shards")
