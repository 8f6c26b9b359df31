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
    added = live.post("/documents", json={"documents": new}, headers=KEY).json()
    assert added["added"] == 3 and added["pending_changes"] == 3 and added["committed"] is False
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


def test_writes_say_they_are_pending_and_health_and_metrics_count_them(live, mini_data):
    new = _new(mini_data, 2)
    generation = live.get("/health").json()["generation"]
    added = live.post("/documents", json={"documents": new}, headers=KEY).json()
    assert added["committed"] is False and "POST /commit" in added["note"] and added["generation"] == generation
    deleted = live.delete(f"/documents/{list(mini_data.corpus)[0]}", headers=KEY).json()
    assert deleted["committed"] is False and deleted["pending_changes"] == 3
    health = live.get("/health").json()
    assert health["pending_changes"] == 3 and health["n_segments"] == 1
    assert "uhdsearch_pending_changes 3.0" in live.get("/metrics").text
    live.post("/commit", headers=KEY)
    health = live.get("/health").json()
    assert health["pending_changes"] == 0 and health["n_segments"] == 2 and health["n_documents"] == 301
    text = live.get("/metrics").text
    assert "uhdsearch_pending_changes 0.0" in text and "uhdsearch_index_segments 2.0" in text


def test_commit_true_commits_in_the_same_call(live, mini_data):
    new = _new(mini_data, 1)[0]
    added = live.post("/documents", params={"commit": "true"}, json={"documents": [new]}, headers=KEY).json()
    assert added["committed"] is True and added["pending_changes"] == 0 and "note" not in added
    hits = live.get("/search", params={"q": new["title"], "k": 3}).json()
    assert hits["generation"] == added["generation"] and hits["results"][0]["hits"][0]["doc_id"] == new["doc_id"]
    gone = live.delete(f"/documents/{new['doc_id']}", params={"commit": "true"}, headers=KEY).json()
    assert gone["committed"] is True and gone["generation"] > added["generation"]
    assert live.get(f"/documents/{new['doc_id']}").status_code == 404
    assert live.get("/health").json()["pending_changes"] == 0


def test_a_torn_store_tail_is_cut_by_the_writer_and_loses_no_later_text(segmented, served_encoder, mini_data):
    from uhdsearch.serving.documents import ADDED_FILE

    store = segmented / ADDED_FILE
    whole = '{"_id": "old", "title": "Old", "text": "kept"}\n'
    store.write_text(whole + '{"_id": "torn", "title": "cut sho', encoding="utf-8")  # killed mid-append
    reader = SearchService.open(served_encoder, segmented, None, writable=False)
    assert store.read_text(encoding="utf-8").endswith("cut sho")  # a reader never cuts what a writer may append
    assert reader.documents.get("old").text == "kept" and reader.documents.get("torn") is None
    app = create_app(SearchService.open(served_encoder, segmented, None), ServeSettings(api_key="s3cret"))
    assert store.read_text(encoding="utf-8") == whole
    new = _new(mini_data, 1)
    with TestClient(app, base_url="http://localhost") as client:
        client.post("/documents", params={"commit": "true"}, json={"documents": new}, headers=KEY)
    again = SearchService.open(served_encoder, segmented, None, writable=False)
    assert again.document(new[0]["doc_id"]).text == new[0]["text"]
    assert again.documents.get("old").text == "kept"


def test_the_id_map_of_a_new_snapshot_is_built_off_the_event_loop(live, mini_data, monkeypatch):
    """/documents/{id} after a commit must not build the map of every doc_id on the event loop (it stalls every
    other request on a large index): the commit builds it on its worker thread."""
    import asyncio

    from uhdsearch.index.live.segments import SegmentedIndex

    on_loop = []
    doc_ids = SegmentedIndex.doc_ids

    def recording(self):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return doc_ids.fget(self)

    monkeypatch.setattr(SegmentedIndex, "doc_ids", property(recording))
    new = _new(mini_data, 2)
    assert live.post("/documents", params={"commit": "true"}, json={"documents": new}, headers=KEY).status_code == 200
    for d in new:
        assert live.get(f"/documents/{d['doc_id']}").json()["title"] == d["title"]
    assert live.get("/documents/no-such-doc").status_code == 404
    assert on_loop and not any(on_loop), on_loop  # read (by the commit), and never on the loop
