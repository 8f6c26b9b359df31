"""Caps on everything a request can make big (413/422 naming the field, nothing done), non-finite scores as 422
not 500, path-traversal URLs as 404."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

KEY = {"X-API-Key": "s3cret"}
QUERY = "vitamin d deficiency and bone density"
LIMITS = dict(max_k=50, max_batch=4, max_hits=100, max_candidates=5, max_query_k=64, max_bucket_weight=10.0,
              max_title_chars=20, max_text_chars=100)


@pytest.fixture
def client(segmented, served_encoder):
    app = create_app(SearchService.open(served_encoder, segmented, None), ServeSettings(api_key="s3cret", **LIMITS))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def _queries(n: int) -> list[dict]:
    return [{"query_id": str(i), "text": f"{QUERY} {i}"} for i in range(n)]


def test_every_cap_refuses_with_the_field_named_and_changes_nothing(client):
    cases = [
        (("post", "/search", {"json": {"queries": _queries(3), "k": 34}}), 413, "at most 100"),  # 102 hits
        (("post", "/search", {"json": {"queries": _queries(5), "k": 1}}), 413, "at most 4"),
        (("post", "/search", {"json": {"queries": _queries(1), "candidates": {"0": list("abcdef")}}}), 422,
         "candidates"),
        (("get", "/search", {"params": {"q": QUERY, "query_k": 65}}), 422, "query_k=65"),
        (("get", "/search", {"params": {"q": QUERY, "query_k": 10**30}}), 422, "query_k"),
        (("get", "/explain", {"params": {"q": QUERY, "doc_id": "x", "query_k": 65}}), 422, "query_k"),
        (("get", "/search", {"params": {"q": QUERY, "bucket_weights": "1,11"}}), 422, "bucket_weights"),
        (("get", "/search", {"params": {"q": QUERY, "bucket_weights": "1,inf"}}), 422, "bucket_weights"),
        (("get", "/search", {"params": {"q": QUERY, "bucket_weights": "nan,1"}}), 422, "bucket_weights"),
        (("post", "/search", {"json": {"queries": _queries(1), "bucket_weights": [1, -1e30]}}), 422,
         "bucket_weights"),
        (("post", "/documents", {"json": {"documents": [{"doc_id": "n", "title": "t" * 21, "text": "x"}]},
                                 "headers": KEY}), 422, "documents[0].title"),
        (("post", "/documents", {"json": {"documents": [{"doc_id": "n", "text": "x" * 101}]}, "headers": KEY}), 422,
         "documents[0].text"),
    ]
    for (method, url, kwargs), status, words in cases:
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == status, (url, kwargs, response.text)
        assert words.lower() in response.json()["error"].lower(), response.text
    assert client.app.state.service._pending == []
    assert client.post("/search", json={"queries": _queries(2), "k": 50}).status_code == 200  # 100 hits: allowed
    assert client.get("/search", params={"q": QUERY, "query_k": 64, "bucket_weights": "10,-10"}).status_code == 200


def test_scores_that_overflow_are_a_422_not_a_500(segmented, served_encoder):
    settings = ServeSettings(max_bucket_weight=1.7e308)  # no cap to speak of: scores overflow to inf
    with TestClient(create_app(SearchService.open(served_encoder, segmented, None), settings),
                    base_url="http://localhost") as client:
        # binary: counts over many dims times the weight (weighted scores stay below the weight)
        params = {"q": QUERY, "bucket_weights": "1.7e308,1.7e308", "scoring": "binary"}
        response = client.get("/search", params=params)
        assert response.status_code == 422 and "not finite" in response.json()["error"], response.text
        doc_id = client.get("/search", params={"q": QUERY, "k": 1}).json()["results"][0]["hits"][0]["doc_id"]
        explained = client.get("/explain", params={**params, "doc_id": doc_id})
        assert explained.status_code == 422, explained.text


@pytest.mark.parametrize("url", ["/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd",
                                 "/static/..%2f..%2f..%2fetc%2fpasswd", "/static/%2e%2e%2fapp.py",
                                 "/documents/..%2f..%2fetc%2fpasswd", "/..%2f..%2fetc/passwd"])
def test_path_traversal_urls_are_404(client, url):
    response = client.get(url)
    assert response.status_code == 404, response.text
    assert "root:" not in response.text and "create_app" not in response.text
