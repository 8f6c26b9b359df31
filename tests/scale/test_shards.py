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


def test_a_segmented_index_splits_into_its_live_documents(segmented_index, tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    source = SegmentedIndex.open(segmented_index)
    live = [d for d in source.doc_ids if d is not None]
    assert source.n_segments == 3 and len(live) == 375 and len(source.doc_ids) == 400
    dirs = split_index(segmented_index, 2, tmp_path / "shards")
    shards = [InvertedIndex.load(d) for d in dirs]
    assert [s.n_documents for s in shards] == [188, 187] and shards[0].variant == "weighted"
    assert [d for s in shards for d in s.doc_ids] == live
    expected = source.document_frequencies(0)
    assert np.array_equal(shards[0].document_frequencies(0) + shards[1].document_frequencies(0), expected)


def _kill(pid: int) -> None:
    import os
    import signal

    os.kill(pid, signal.SIGKILL)


def test_replicas_answer_as_the_unsharded_index_and_survive_a_killed_replica(
        ray_cluster, tiny_encoder_session, segmented_index, mini_data, tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    source = SegmentedIndex.open(segmented_index)
    sharded = ShardedIndex(split_index(segmented_index, 2, tmp_path / "shards"), replicas=2)
    try:
        assert sharded.replicas == 2 and sharded.n_documents == 375
        expected = {k: Searcher(tiny_encoder_session, source).search(mini_data.queries, k=k) for k in (1, 10, 1000)}
        for k, want in expected.items():
            assert Searcher(tiny_encoder_session, sharded).search(mini_data.queries, k=k).results == want.results
        stats = sharded.replica_stats()
        assert [len(s) for s in stats] == [2, 2]
        assert all(r["searches"] > 0 for s in stats for r in s)  # 3 requests spread over both replicas
        _kill(stats[0][0]["pid"])  # a replica of shard 0 dies (as on a lost node)
        for _ in range(2):  # the next requests reach the dead replica's turn: retried on the other one
            for k, want in expected.items():
                assert Searcher(tiny_encoder_session, sharded).search(mini_data.queries, k=k).results == want.results
        assert [len(s) for s in sharded.replica_stats()] == [1, 2]
    finally:
        sharded.close()
