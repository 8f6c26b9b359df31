"""/explain keeps the latest documents' token winners: a repeat costs no encoding, answers the same, and a
replaced text is encoded again."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.explain import WinnersCache, token_winners  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

QUERY = "vitamin d deficiency and bone density"


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.tokens == y.tokens
        np.testing.assert_array_equal(x.values, y.values)
        np.testing.assert_array_equal(x.dims, y.dims)


@pytest.fixture(scope="module")
def corpus(served):
    from uhdsearch.evaluation.datasets import load_corpus

    return load_corpus(served / "corpus.jsonl")


def test_a_cached_document_answers_as_encoding_it_again(served_encoder, mini_data):
    docs = list(mini_data.corpus.values())[:3]
    cache = WinnersCache(2)
    first = cache.get(served_encoder, docs[0].doc_id, docs[0].full_text)
    _same(first, token_winners(served_encoder, [docs[0].full_text], "document")[0])
    assert cache.get(served_encoder, docs[0].doc_id, docs[0].full_text) is first
    assert (cache.hits, cache.misses) == (1, 1)
    cache.get(served_encoder, docs[0].doc_id, docs[1].full_text)  # the same id with a new text: encoded again
    assert (cache.hits, cache.misses) == (1, 2)
    for d in docs[1:]:  # two more documents: the least recently asked goes
        cache.get(served_encoder, d.doc_id, d.full_text)
    assert len(cache) == 2
    cache.get(served_encoder, docs[0].doc_id, docs[1].full_text)
    assert cache.misses == 5


def test_a_cache_of_nothing_keeps_nothing(served_encoder, mini_data):
    doc = next(iter(mini_data.corpus.values()))
    cache = WinnersCache(0)
    for _ in range(2):
        cache.get(served_encoder, doc.doc_id, doc.full_text)
    assert (len(cache), cache.hits, cache.misses) == (0, 0, 2)
    with pytest.raises(ValueError, match="capacity"):
        WinnersCache(-1)


def test_explain_answers_the_same_from_the_cache_and_metrics_count_it(served, served_encoder, corpus):
    answers = {}
    for capacity in (0, 16):
        service = SearchService.open(served_encoder, served / "index", corpus)
        with TestClient(create_app(service, ServeSettings(explain_cache=capacity)),
                        base_url="http://localhost") as client:
            hit = client.get("/search", params={"q": QUERY, "k": 1}).json()["results"][0]["hits"][0]
            encodings = _encodings(client)
            twice = [client.get("/explain", params={"q": QUERY, "doc_id": hit["doc_id"]}).json() for _ in range(2)]
            assert twice[0] == twice[1] and twice[0]["document_text"]
            answers[capacity] = twice[0]
            metrics = client.get("/metrics").text
            assert _encodings(client) == encodings  # the query is scored from its token winners' one pass
            hits = 1 if capacity else 0
            assert f'uhdsearch_explain_cache_lookups{{result="hit"}} {hits:.1f}' in metrics
            assert f'uhdsearch_explain_cache_lookups{{result="miss"}} {2 - hits:.1f}' in metrics
    assert answers[0] == answers[16]


def _encodings(client) -> float:
    import re

    return float(re.search(r"^uhdsearch_encode_seconds_count ([0-9.e+]+)$", client.get("/metrics").text, re.M)[1])


def test_the_cache_size_is_checked():
    from uhdsearch.errors import UsageError

    with pytest.raises(UsageError, match="explain_cache"):
        ServeSettings(explain_cache=-1)


def test_explain_pools_the_query_from_its_token_winners_as_encoding_does(served_encoder):
    from uhdsearch.serving.explain import query_winners

    winners, raw = query_winners(served_encoder, QUERY)
    encoded = served_encoder.encode([QUERY], "query")
    assert len(winners) == raw.n_buckets == encoded.n_buckets
    for mine, theirs in zip(raw.buckets, encoded.buckets):
        np.testing.assert_array_equal(mine.indices, theirs.indices)
        np.testing.assert_array_equal(mine.data, theirs.data)
