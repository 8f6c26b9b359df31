"""The service binds one Searcher per committed snapshot; requests pass their options, and what the Searcher
derives from the index (document frequencies, rerank's document vectors) is built once."""
from __future__ import annotations

import pytest

from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.search.searcher import Searcher

QUERY = "vitamin d and bone density"


@pytest.fixture
def counted(monkeypatch):
    """Counts of Searcher constructions and of the whole-index work (the real methods, counted)."""
    counts = {"searchers": 0, "document_vectors": 0, "document_frequencies": 0}
    build, vectors, frequencies = Searcher.__init__, InvertedIndex.document_vectors, InvertedIndex.document_frequencies

    def counting_build(self, *args, **kwargs):
        counts["searchers"] += 1
        build(self, *args, **kwargs)

    def counting_vectors(self):
        counts["document_vectors"] += 1
        return vectors(self)

    def counting_frequencies(self, bucket=0):
        counts["document_frequencies"] += 1
        return frequencies(self, bucket)

    monkeypatch.setattr(Searcher, "__init__", counting_build)
    monkeypatch.setattr(InvertedIndex, "document_vectors", counting_vectors)
    monkeypatch.setattr(InvertedIndex, "document_frequencies", counting_frequencies)
    return counts


def test_a_hundred_requests_build_one_searcher_and_the_index_work_once(served, served_encoder, counted):
    from fastapi.testclient import TestClient

    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.serving.settings import ServeSettings

    service = SearchService.open(served_encoder, served / "index", writable=False)
    built_at_open = counted["searchers"]
    doc_ids = list(service.snapshot.index.doc_ids)
    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        first = client.get("/search", params={"q": QUERY, "k": 5}).json()["results"][0]["hits"]
        for i in range(33):
            options = [{}, {"max_df": "0.5"}, {"scoring": "binary", "length_norm": "0.5"}][i % 3]
            assert client.get("/search", params={"q": QUERY, "k": 5, **options}).status_code == 200
            pool = {"q1": doc_ids[i:i + 50]}
            body = {"queries": [{"query_id": "q1", "text": QUERY}], "k": 10, "scoring": "binary",
                    "candidates": pool}
            assert client.post("/search", json=body).status_code == 200
            doc_id = first[0]["doc_id"]
            assert client.get("/explain", params={"q": QUERY, "doc_id": doc_id, "max_df": "none"}).status_code == 200
        again = client.get("/search", params={"q": QUERY, "k": 5}).json()["results"][0]["hits"]
    assert again == first  # 100 requests later, the default search is what it was
    assert counted["searchers"] - built_at_open == 1  # one Searcher for the snapshot, whatever the options
    assert counted["document_vectors"] == 1  # rerank's binarized vectors, built for the first rerank only
    assert counted["document_frequencies"] <= service.snapshot.index.n_buckets  # once per bucket at most


def test_a_commit_binds_a_new_searcher_before_the_swap(segmented, served_encoder, mini_encoding, mini_data):
    from uhdsearch.search.options import SearchOptions
    from uhdsearch.serving.service import SearchService
    from uhdsearch.types import Document, Query

    service = SearchService.open(served_encoder, segmented)
    try:
        before = service.searcher(service.snapshot)
        assert service.searcher(service.snapshot) is before
        ids = list(mini_data.corpus)
        service.add([Document(d, mini_data.corpus[d].text, mini_data.corpus[d].title) for d in ids[300:305]])
        service.commit()
        after = service.searcher(service.snapshot)
        assert after is not before and after.index is service.snapshot.index
        assert service.searcher(service.snapshot) is after
        run, snapshot = service.search([Query("q", QUERY)], 400, SearchOptions.paper())
        assert snapshot.generation == service.snapshot.generation and len(run["q"]) > 0
        assert set(h.doc_id for h in run["q"]) <= set(ids[:305])
    finally:
        service.close()
