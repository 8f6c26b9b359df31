"""The HTTP API through FastAPI's TestClient, on a tiny real model and scifact-mini."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

QUERY = "vitamin d deficiency and bone density"


@pytest.fixture(scope="module")
def corpus(served):
    from uhdsearch.evaluation.datasets import load_corpus

    return load_corpus(served / "corpus.jsonl")


@pytest.fixture(scope="module")
def client(served, served_encoder, corpus):
    from uhdsearch.baselines.bm25 import BM25Retriever

    service = SearchService.open(served_encoder, served / "index", corpus, bm25=BM25Retriever.build(corpus),
                                 typical_sample=40)
    app = create_app(service, ServeSettings(max_k=50, max_batch=4, max_query_chars=500, max_body_bytes=4000))
    with TestClient(app, base_url="http://localhost") as c:
        assert app.state.ready.wait(120)
        yield c


def test_get_search_ranks_as_the_cli_does(client, served, capsys):
    from uhdsearch.cli.main import main

    assert main(["search", "--model", str(served / "model"), "--index", str(served / "index"), "--query", QUERY,
                 "--k", "7", "--scoring", "binary", "--query-k", "20"]) == 0
    cli = [line.split() for line in capsys.readouterr().out.splitlines()]
    response = client.get("/search", params={"q": QUERY, "k": 7, "scoring": "binary", "query_k": 20})
    assert response.status_code == 200
    hits = response.json()["results"][0]["hits"]
    assert len(hits) == 7 == len(cli)
    assert [h["doc_id"] for h in hits] == [row[2] for row in cli]
    assert [h["rank"] for h in hits] == [int(row[3]) for row in cli] == list(range(1, 8))
    assert [h["score"] for h in hits] == pytest.approx([float(row[4]) for row in cli], rel=1e-5)


def test_hits_carry_title_and_snippet(client, corpus):
    hit = client.get("/search", params={"q": QUERY, "k": 1}).json()["results"][0]["hits"][0]
    document = corpus[hit["doc_id"]]
    assert hit["title"] == document.title
    assert hit["snippet"].rstrip(" …") in document.text and 0 < len(hit["snippet"]) <= 242


def test_post_batch_matches_get_and_the_searcher(client, served_encoder, served):
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.search.searcher import Searcher

    texts = {"a": QUERY, "b": "heart failure after surgery", "c": ""}
    body = {"queries": [{"query_id": q, "text": t} for q, t in texts.items()], "k": 5, "bucket_weights": [1.0, 0.5]}
    results = {r["query_id"]: r["hits"] for r in client.post("/search", json=body).json()["results"]}
    expected = Searcher(served_encoder, InvertedIndex.load(served / "index"), bucket_weights=[1.0, 0.5]).search(texts, 5)
    for q in ("a", "b"):
        assert [(h["doc_id"], h["score"]) for h in results[q]] == [(s.doc_id, pytest.approx(s.score))
                                                                  for s in expected[q]]
    assert results["c"] == []  # an empty query gets no hits, as in the CLI
    single = client.get("/search", params={"q": QUERY, "k": 5, "bucket_weights": "1,0.5"}).json()["results"][0]
    # One query alone is encoded without batch padding: the same ranking, floats equal to ~1e-7.
    assert [h["doc_id"] for h in single["hits"]] == [h["doc_id"] for h in results["a"]]
    assert [h["score"] for h in single["hits"]] == pytest.approx([h["score"] for h in results["a"]], rel=1e-5)


def test_rerank_scores_only_the_candidates(client):
    full = client.get("/search", params={"q": QUERY, "k": 20}).json()["results"][0]["hits"]
    pool = [h["doc_id"] for h in full[10:20]][::-1]
    body = {"queries": [{"query_id": "q", "text": QUERY}], "k": 5, "candidates": {"q": pool}}
    hits = client.post("/search", json=body).json()["results"][0]["hits"]
    assert [h["doc_id"] for h in hits] == [h["doc_id"] for h in full[10:15]]
    bad = dict(body, candidates={"q": ["no-such-doc"]})
    assert client.post("/search", json=bad).status_code == 422


def test_bm25_ranking_beside(client, corpus):
    from uhdsearch.baselines.bm25 import BM25Retriever

    hits = client.get("/search", params={"q": QUERY, "k": 5, "system": "bm25"}).json()["results"][0]["hits"]
    expected = BM25Retriever.build(corpus).search({"q": QUERY}, 5)["q"]
    assert [h["doc_id"] for h in hits] == [s.doc_id for s in expected]


def test_bm25_draws_no_progress_bar_in_the_server_log(client, capfd):
    capfd.readouterr()
    response = client.get("/search", params={"q": QUERY, "k": 5, "system": "bm25"})
    assert response.status_code == 200 and len(response.json()["results"][0]["hits"]) == 5
    err = capfd.readouterr().err
    assert "BM25 search" not in err and "it/s" not in err, err


def test_document_lookup(client, corpus):
    doc_id = next(iter(corpus))
    assert client.get(f"/documents/{doc_id}").json() == {"doc_id": doc_id, "title": corpus[doc_id].title,
                                                          "text": corpus[doc_id].text}
    missing = client.get("/documents/no-such-doc")
    assert missing.status_code == 404 and "no-such-doc" in missing.json()["error"]


def test_explain_adds_up_to_the_score_and_names_the_tokens(client, served_encoder, corpus):
    hit = client.get("/search", params={"q": QUERY, "k": 1, "scoring": "weighted"}).json()["results"][0]["hits"][0]
    client.app.state.service.typical.wait(120)
    data = client.get("/explain", params={"q": QUERY, "doc_id": hit["doc_id"], "scoring": "weighted"}).json()
    assert data["score"] == pytest.approx(hit["score"], rel=1e-4)
    query = served_encoder.encode([QUERY], "query")
    document = served_encoder.encode([corpus[hit["doc_id"]].full_text], "document")
    assert [b["bucket"] for b in data["buckets"]] == [0, 1] and data["typical_tokens"] == "ready"
    for bucket in data["buckets"]:
        b = bucket["bucket"]
        shared = set(query.buckets[b].indices) & set(document.buckets[b].indices)
        assert bucket["n_matched"] == len(shared) > 0
        assert {d["dim"] for d in bucket["dims"]} <= shared and len(bucket["dims"]) == min(50, len(shared))
        q_values = dict(zip(query.buckets[b].indices, query.buckets[b].data))
        d_values = dict(zip(document.buckets[b].indices, document.buckets[b].data))
        for d in bucket["dims"]:
            assert d["contribution"] == pytest.approx(q_values[d["dim"]] * d_values[d["dim"]] * bucket["weight"],
                                                      rel=1e-3)
            assert d["query_tokens"] and d["document_tokens"] and d["typical_tokens"] is not None
        contributions = [d["contribution"] for d in bucket["dims"]]
        assert contributions == sorted(contributions, reverse=True)
    assert client.get("/explain", params={"q": QUERY, "doc_id": "nope"}).status_code == 404


@pytest.mark.parametrize(("request_args", "status", "words"), [
    (("get", "/search", {"params": {"q": QUERY, "k": 0}}), 422, "k"),
    (("get", "/search", {"params": {"q": QUERY, "k": 51}}), 422, "limit of 50"),
    (("get", "/search", {"params": {"q": QUERY, "k": "ten"}}), 422, "k"),
    (("get", "/search", {"params": {"k": 5}}), 422, "q"),
    (("get", "/search", {"params": {"q": "x" * 501}}), 422, "at most 500"),
    (("get", "/search", {"params": {"q": QUERY, "scoring": "cosine"}}), 422, "scoring"),
    (("get", "/search", {"params": {"q": QUERY, "bucket_weights": "1,a"}}), 422, "bucket_weights"),
    (("get", "/search", {"params": {"q": QUERY, "bucket_weights": "1"}}), 422, "1 bucket weights for 2"),
    (("post", "/search", {"content": b"{not json", "headers": {"content-type": "application/json"}}), 400, "JSON"),
    (("post", "/search", {"json": {"queries": "vitamin"}}), 422, "queries"),
    (("post", "/search", {"json": {"queries": [{"query_id": "a", "text": 3}]}}), 422, "text"),
    (("post", "/search", {"json": {"queries": [{"query_id": "a", "text": "x"}], "depth": 3}}), 422, "depth"),
    (("post", "/search", {"json": {"queries": [{"query_id": "a", "text": "x"}] * 2}}), 422, "twice"),
    (("post", "/search", {"json": {"queries": [{"query_id": str(i), "text": "x"} for i in range(5)]}}), 413, "4"),
    (("post", "/search", {"json": {"queries": [{"query_id": "a", "text": "x" * 5000}]}}), 413, "4000 bytes"),
    (("get", "/no-such-page", {}), 404, "Not Found"),
    (("post", "/documents", {"json": {"documents": [{"doc_id": "n", "text": "t"}]}}), 405, "static index"),
])
def test_bad_requests_get_json_errors(client, request_args, status, words):
    method, url, kwargs = request_args
    response = getattr(client, method)(url, **kwargs)
    assert response.status_code == status, response.text
    assert words.lower() in response.json()["error"].lower()


def test_chunked_body_over_the_limit_is_refused(client):
    def chunks():
        for _ in range(10):
            yield b" " * 1000

    response = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_health_ready_and_metrics(client):
    health = client.get("/health").json()
    assert health["n_documents"] == 400 and health["bm25"] and health["variant"] == "weighted"
    assert client.get("/ready").json() == {"ready": True}
    before = _counter(client.get("/metrics").text, 'endpoint="/documents/{doc_id}",method="GET",status="404"')
    client.get("/documents/x1")
    client.get("/documents/x2")
    text = client.get("/metrics").text
    assert _counter(text, 'endpoint="/documents/{doc_id}",method="GET",status="404"') == before + 2
    assert "uhdsearch_index_documents 400.0" in text
    assert "uhdsearch_encode_seconds_count" in text and 'uhdsearch_request_seconds_bucket{endpoint="/search"' in text


def test_openapi_lists_the_endpoints(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/explain", "/documents", "/documents/{doc_id}", "/commit", "/health"} <= set(paths)


def _counter(text: str, labels: str) -> float:
    for line in text.splitlines():
        if line.startswith("uhdsearch_requests_total{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_settings_refuse_bad_limits_and_check_the_token():
    from uhdsearch.errors import UsageError
    from uhdsearch.serving.settings import is_loopback

    with pytest.raises(UsageError, match="max_k"):
        ServeSettings(max_k=0)
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.1.2.3")] == [
        True, True, True, False, False]
    assert ServeSettings().write_refusal(None)[0] == 403  # no key: writes are off, on loopback too
    assert ServeSettings(loopback=False).write_refusal("anything")[0] == 403
    keyed = ServeSettings(api_key="s3cret")
    assert keyed.write_refusal(None)[0] == 401 and keyed.write_refusal("s3cre")[0] == 401
    assert keyed.write_refusal("s3cret") is None
    assert "s3cret" not in repr(keyed) and "s3cret" not in str(keyed.api_key) and "s3cret" not in repr(keyed.api_key)
    assert all("s3cret" not in message for _, message in (keyed.write_refusal(None), keyed.write_refusal("x")))
    json.dumps(ServeSettings().__dict__)  # plain values, loggable


@pytest.mark.parametrize("workers", [1, 2])
def test_at_most_workers_requests_encode_or_search_at_once(served, served_encoder, corpus, workers):
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    service = SearchService.open(served_encoder, served / "index", corpus)
    running, peak, lock = [0], [0], threading.Lock()
    search = service.search

    def counted(*args, **kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)  # long enough for the other requests to arrive meanwhile
        try:
            return search(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    service.search = counted
    with TestClient(create_app(service, ServeSettings(workers=workers)), base_url="http://localhost") as c:
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda i: c.get("/search", params={"q": f"{QUERY} {i}"}).status_code,
                                     range(8)))
    assert statuses == [200] * 8
    assert peak[0] == workers


def test_workers_must_be_positive():
    from uhdsearch.errors import UsageError

    with pytest.raises(UsageError, match="workers=0"):
        ServeSettings(workers=0)


@pytest.mark.parametrize("scoring", ["binary", "weighted"])
def test_explain_takes_idf_as_search_does(client, scoring):
    params = {"q": QUERY, "scoring": scoring, "idf": "true"}
    hits = client.get("/search", params={**params, "k": 3}).json()["results"][0]["hits"]
    for hit in hits:
        data = client.get("/explain", params={**params, "doc_id": hit["doc_id"]}).json()
        assert data["score"] == pytest.approx(hit["score"], rel=1e-4)
        assert data["options"]["idf"] is True and data["options"]["cascade"] is None
    plain = client.get("/explain", params={"q": QUERY, "scoring": scoring, "doc_id": hits[0]["doc_id"]}).json()
    assert plain["options"]["idf"] is False and plain["score"] != pytest.approx(hits[0]["score"], rel=1e-4)


def test_explain_takes_the_cascade_as_search_does(client):
    params = {"q": QUERY, "scoring": "binary", "cascade": "0.1:5", "max_df": "none"}
    hits = client.get("/search", params={**params, "k": 5}).json()["results"][0]["hits"]
    assert len(hits) == 5
    for hit in hits:
        data = client.get("/explain", params={**params, "doc_id": hit["doc_id"]}).json()
        assert data["score"] == pytest.approx(hit["score"], rel=1e-4)  # a cascade's hits are scored exactly
        cascade = data["options"]["cascade"]
        assert (cascade["first_max_df"], cascade["depth"]) == (0.1, 5)
        dims = [d for b in data["buckets"] for d in b["dims"]]
        first = sum(d["contribution"] for d in dims if d["first_pass"])
        assert 0 <= first <= cascade["first_pass_score"] + 1e-9 <= data["score"] + 2e-9  # dims: the top 50
    assert any(not d["first_pass"] for b in data["buckets"] for d in b["dims"])  # frequent dims: second pass


@pytest.mark.parametrize(("params", "words"), [
    ({"cascade": "0.1:5", "scoring": "weighted"}, "cascade"),  # the index's weighted scoring cannot cascade
    ({"cascade": "often"}, "cascade"),
    ({"cascade": "0.1:500"}, "max_k=50"),
    ({"idf": "maybe"}, "idf"),
])
def test_explain_refuses_the_options_search_refuses(client, params, words):
    doc_id = client.get("/search", params={"q": QUERY, "k": 1}).json()["results"][0]["hits"][0]["doc_id"]
    for path, extra in (("/search", {}), ("/explain", {"doc_id": doc_id})):
        response = client.get(path, params={"q": QUERY, **params, **extra})
        assert response.status_code == 422 and words in response.json()["error"], (path, response.text)


def test_explain_token_lists_are_the_same_through_onnx_runtime(served, corpus):
    pytest.importorskip("onnxruntime")
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.serving.explain import token_winners

    encoder = UHDEncoder.from_pretrained(served / "model")
    texts = [QUERY, next(iter(corpus.values())).full_text]
    plain = token_winners(encoder, texts, "document")
    encoder.use_onnx_runtime(threads=1)
    fast = token_winners(encoder, texts, "document")
    import torch

    with torch.inference_mode():
        assert encoder._backbone_runner() is not encoder.backbone  # what token_winners ran: the ONNX session
    for mine, theirs in zip(plain, fast):
        for a, b in zip(mine, theirs):
            assert a.tokens == b.tokens and (a.dims == b.dims).mean() > 0.99
            assert np.allclose(a.values, b.values, atol=1e-4)
