"""Writes on a segmented index: the API key, commit visibility, 409/423, bad writes leave the index unchanged."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

KEY = {"Authorization": "Bearer s3cret"}


def _new(mini_data, n=3):
    return [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in list(mini_data.corpus.values())[-n:]]


def _state(client):
    health = client.get("/health").json()
    return health["generation"], health["n_documents"]


def test_added_documents_appear_only_at_commit(live, mini_data, segmented, served_encoder):
    new = _new(mini_data)
    query = new[0]["title"]
    assert live.post("/documents", json={"documents": new}, headers=KEY).json() == {"added": 3, "pending": 3}
    before = live.get("/search", params={"q": query, "k": 400}).json()
    assert new[0]["doc_id"] not in [h["doc_id"] for h in before["results"][0]["hits"]]
    assert live.get(f"/documents/{new[0]['doc_id']}").status_code == 404
    done = live.post("/commit", headers=KEY).json()
    assert done["n_documents"] == 303 and done["generation"] > before["generation"]
    after = live.get("/search", params={"q": query, "k": 5}).json()
    assert after["generation"] == done["generation"]
    top = after["results"][0]["hits"][0]
    assert top["doc_id"] == new[0]["doc_id"] and top["title"] == new[0]["title"]
    assert live.get(f"/documents/{new[0]['doc_id']}").json()["text"] == new[0]["text"]
    assert live.delete(f"/documents/{new[0]['doc_id']}", headers={"X-API-Key": "s3cret"}).status_code == 200
    assert live.get(f"/documents/{new[0]['doc_id']}").status_code == 200  # not before the commit
    live.post("/commit", headers=KEY)
    assert live.get(f"/documents/{new[0]['doc_id']}").status_code == 404
    assert new[0]["doc_id"] not in [h["doc_id"] for h in
                                    live.get("/search", params={"q": query, "k": 400}).json()["results"][0]["hits"]]
    # A restarted server (the writer released at shutdown) still knows the added texts.
    live.app.state.service.close()
    again = SearchService.open(served_encoder, segmented, None, writable=False)
    assert again.document(new[1]["doc_id"]).text == new[1]["text"]


@pytest.mark.parametrize(("call", "status", "words"), [
    (lambda c, docs: c.post("/documents", json={"documents": docs}), 401, "API key"),
    (lambda c, docs: c.post("/documents", json={"documents": docs}, headers={"X-API-Key": "wrong"}), 401, "wrong"),
    (lambda c, docs: c.post("/commit"), 401, "API key"),
    (lambda c, docs: c.delete("/documents/x"), 401, "API key"),
    (lambda c, docs: c.delete("/documents/no-such-doc", headers=KEY), 404, "no-such-doc"),
    (lambda c, docs: c.post("/documents", json={"documents": docs + docs[:1]}, headers=KEY), 422, "twice"),
    (lambda c, docs: c.post("/documents", json={"documents": [{"doc_id": "a\nb", "text": "t"}]}, headers=KEY),
     422, "doc_id"),
    (lambda c, docs: c.post("/documents", json={"documents": []}, headers=KEY), 422, "documents"),
    (lambda c, docs: c.post("/documents", json={"documents": [{"doc_id": "1", "text": 5}]}, headers=KEY),
     422, "text"),
])
def test_bad_writes_are_refused_and_change_nothing(live, mini_data, call, status, words):
    before = _state(live)
    response = call(live, _new(mini_data))
    assert response.status_code == status, response.text
    assert words.lower() in response.json()["error"].lower()
    live.post("/commit", headers=KEY)
    generation, n_documents = _state(live)
    assert n_documents == before[1] == 300


def test_adding_a_live_doc_id_is_a_conflict(live, mini_data):
    existing = list(mini_data.corpus.values())[0]
    body = {"documents": [{"doc_id": existing.doc_id, "text": "other text"}]}
    response = live.post("/documents", json=body, headers=KEY)
    assert response.status_code == 409 and "already" in response.json()["error"]
    assert live.post("/documents", json=dict(body, replace=True), headers=KEY).status_code == 200
    live.post("/commit", headers=KEY)
    assert live.get(f"/documents/{existing.doc_id}").json()["text"] == "other text"


def test_a_second_writer_meanwhile_gets_409(live, mini_data):
    service = live.app.state.service
    assert service._write_lock.acquire(blocking=False)  # a write request under way
    try:
        response = live.post("/documents", json={"documents": _new(mini_data, 1)}, headers=KEY)
        assert response.status_code == 409 and "under way" in response.json()["error"]
        assert live.post("/commit", headers=KEY).status_code == 409
    finally:
        service._write_lock.release()
    assert live.post("/commit", headers=KEY).status_code == 200


def test_an_index_another_process_writes_is_locked(segmented, served_encoder, mini_data):
    from uhdsearch.index.live.segments import SegmentedIndex

    with SegmentedIndex.open(segmented, writable=True):
        app = create_app(SearchService.open(served_encoder, segmented, None))
        with TestClient(app, base_url="http://localhost") as client:
            response = client.post("/documents", json={"documents": _new(mini_data, 1)})
            assert response.status_code == 423 and "locked" in response.json()["error"]
            assert client.get("/search", params={"q": "vitamin", "k": 3}).status_code == 200


@pytest.mark.parametrize("loopback", [True, False])
def test_without_a_key_writes_are_off(segmented, served_encoder, mini_data, loopback):
    app = create_app(SearchService.open(served_encoder, segmented, None), ServeSettings(loopback=loopback))
    with TestClient(app, base_url="http://localhost") as client:
        response = client.post("/documents", json={"documents": _new(mini_data, 1)})
        assert response.status_code == 403 and "no API key" in response.json()["error"]
        assert client.get("/health").json()["writes"] is False
