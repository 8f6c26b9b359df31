"""Batched query encoding: concurrent requests' queries are encoded together, each request gets the hits it gets
alone, and an error in one request's query fails that request only."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.errors import UsageError  # noqa: E402
from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

QUERIES = ["vitamin d deficiency and bone density", "heart failure after surgery", "tumour suppressor genes",
           "antibiotic resistance in hospitals", "sleep and memory consolidation", "insulin signalling in muscle",
           "gut microbiome and obesity", "stem cells repair the heart"]


class Refusing:
    """The real encoder, except that it refuses any batch holding a text with 'boom' (as a tokenizer might)."""

    def __init__(self, encoder) -> None:
        self._encoder = encoder

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode(self, texts, kind="query", *args, **kwargs):
        if any("boom" in t for t in texts):
            raise UsageError("this query cannot be encoded: 'boom'")
        return self._encoder.encode(texts, kind, *args, **kwargs)


def _client(service, **settings) -> TestClient:
    return TestClient(create_app(service, ServeSettings(**settings)), base_url="http://localhost")


def _hits(response) -> list[tuple[str, float]]:
    assert response.status_code == 200, response.text
    return [(h["doc_id"], h["score"]) for h in response.json()["results"][0]["hits"]]


def _concurrently(client, requests: list[dict]) -> list:
    def call(request):
        if "json" in request:
            return client.post("/search", json=request["json"])
        return client.get("/search", params=request["params"])

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(call, requests))


@pytest.fixture(scope="module")
def alone(served, served_encoder):
    """Each query's hits, one request at a time, without batching."""
    service = SearchService.open(served_encoder, served / "index", None)
    with _client(service, encode_batch=1, encode_wait_s=0) as client:
        answers = {q: _hits(client.get("/search", params={"q": q, "k": 10, "scoring": "weighted"})) for q in QUERIES}
        assert set(client.app.state.batcher.sizes) == {1}
    return answers


def test_concurrent_requests_get_the_hits_they_get_alone(served, served_encoder, alone):
    service = SearchService.open(served_encoder, served / "index", None)
    with _client(service, workers=1, encode_wait_s=1.0) as client:  # long: all join, on loaded cores too
        requests = [{"params": {"q": q, "k": 10, "scoring": "weighted"}} for q in QUERIES]
        requests.append({"json": {"queries": [{"query_id": "a", "text": QUERIES[0]},
                                              {"query_id": "b", "text": QUERIES[1]}], "k": 10,
                                  "scoring": "weighted"}})
        answers = _concurrently(client, requests)
        sizes = client.app.state.batcher.sizes
    assert max(sizes) > 1 and sum(sizes) < len(QUERIES) + 2  # encoded together (a repeated text once)
    for q, response in zip(QUERIES, answers):
        got = _hits(response)
        assert [d for d, _ in got] == [d for d, _ in alone[q]]
        assert [s for _, s in got] == pytest.approx([s for _, s in alone[q]], rel=1e-5)
    batch = {r["query_id"]: [h["doc_id"] for h in r["hits"]] for r in answers[-1].json()["results"]}
    assert batch == {"a": [d for d, _ in alone[QUERIES[0]]], "b": [d for d, _ in alone[QUERIES[1]]]}


def test_an_error_in_one_request_does_not_fail_the_others(served, served_encoder, alone):
    service = SearchService.open(served_encoder, served / "index", None)
    service.query_encoder = Refusing(served_encoder)
    with _client(service, workers=1, encode_wait_s=1.0) as client:  # long: all join, on loaded cores too
        requests = [{"params": {"q": q, "k": 10, "scoring": "weighted"}} for q in QUERIES[:4]]
        requests.insert(2, {"params": {"q": "boom goes the query", "k": 10}})
        answers = _concurrently(client, requests)
        sizes = list(client.app.state.batcher.sizes)
    assert [r.status_code for r in answers] == [200, 200, 422, 200, 200]
    assert "boom" in answers[2].json()["error"]
    assert sizes[0] == 5 and sorted(sizes[1:]) == [1] * 5  # the batch failed; each request then alone
    for q, response in zip(QUERIES[:2] + QUERIES[2:4], answers[:2] + answers[3:]):
        assert [d for d, _ in _hits(response)] == [d for d, _ in alone[q]]


def test_a_full_batch_starts_at_once_and_the_next_one_forms(served, served_encoder):
    service = SearchService.open(served_encoder, served / "index", None)
    with _client(service, workers=1, encode_batch=3, encode_wait_s=0.5) as client:
        answers = _concurrently(client, [{"params": {"q": q}} for q in QUERIES[:7]])
        sizes = client.app.state.batcher.sizes
    assert all(r.status_code == 200 for r in answers)
    assert max(sizes) <= 3 and sum(sizes) == 7
