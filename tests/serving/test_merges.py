"""serve --max-segments: segments merge in the background while searches and writes go on, and searches see
committed states only (a merge changes no ranking: every response equals its generation's committed one)."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.index.live import merges  # noqa: E402
from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

KEY = {"Authorization": "Bearer s3cret"}


def _documents(mini_data, start, stop):
    return [{"doc_id": d.doc_id, "title": d.title, "text": d.text}
            for d in list(mini_data.corpus.values())[start:stop]]


def _ranking(response) -> tuple:
    return tuple((h["doc_id"], h["score"]) for h in response["results"][0]["hits"])


@pytest.fixture
def gate(monkeypatch):
    """Holds a background merge's worker (the real one) before it reads its segments, until `release()`."""
    started, opened = threading.Event(), threading.Event()
    real = merges.live_documents

    def gated(*args, **kwargs):
        started.set()
        assert opened.wait(60), "the test never released the merge"
        return real(*args, **kwargs)

    monkeypatch.setattr(merges, "live_documents", gated)
    return started, opened


def test_merges_run_in_the_background_and_searches_see_committed_states_only(segmented, served_encoder, mini_data,
                                                                            gate):
    started, opened = gate
    query = list(mini_data.corpus.values())[305].title  # one of the documents added below
    corpus = dict(mini_data.corpus)
    service = SearchService.open(served_encoder, segmented, corpus, max_segments=2)
    app = create_app(service, ServeSettings(api_key="s3cret"))
    seen: list[tuple[int, tuple]] = []
    stop = threading.Event()

    with TestClient(app, base_url="http://localhost") as client:
        assert app.state.ready.wait(120)

        def search():
            return client.get("/search", params={"q": query, "k": 20}).json()

        def keep_searching():
            while not stop.is_set():
                found = search()
                seen.append((found["generation"], _ranking(found)))

        for start in (300, 303):  # two commits: three segments, one more than --max-segments
            client.post("/documents", params={"commit": "true"}, json={"documents": _documents(mini_data, start,
                                                                                              start + 3)}, headers=KEY)
        assert started.wait(60) and service.writer.background_merge.state == "running"
        merging_at = client.get("/health").json()
        assert merging_at["n_segments"] == 3 and merging_at["merging"] is True
        searcher = threading.Thread(target=keep_searching)
        searcher.start()
        before = search()  # while the merge is held: the last commit's state
        # Writes go on during the merge: an add and a delete, committed while the merge is still running.
        added = client.post("/documents", params={"commit": "true"}, json={"documents": _documents(mini_data, 306,
                                                                                                    310)}, headers=KEY)
        assert added.status_code == 200, added.text
        gone = client.delete(f"/documents/{list(mini_data.corpus)[301]}", params={"commit": "true"}, headers=KEY)
        assert gone.status_code == 200, gone.text
        assert service.writer.background_merge.state == "running"
        after_writes = search()
        opened.set()  # the merge may finish now; its publisher commits it, and merges again until <= 2 remain
        for _ in range(600):
            health = client.get("/health").json()
            if health["n_segments"] <= 2 and not health["merging"]:
                break
            threading.Event().wait(0.1)
        stop.set()
        searcher.join(60)
        final = search()

    assert health["n_segments"] <= 2 and health["pending_changes"] == 0, health
    assert final["generation"] >= after_writes["generation"] + 1  # the merge was published by its own commit
    # A merge changes no ranking: every response of a generation from the last write on equals the final one,
    # and before it the one at that time; never anything else (a half-published state).
    expected = {before["generation"]: _ranking(before)}
    for generation in range(after_writes["generation"], final["generation"] + 1):
        expected[generation] = _ranking(final)
    assert _ranking(after_writes) == _ranking(final)
    assert len(seen) > 3
    for generation, ranking in seen:
        if generation in expected:
            assert ranking == expected[generation], generation
        else:  # the commit of the add, between before and after_writes: it has the added documents
            assert before["generation"] < generation < after_writes["generation"]
    # The merged index is the same index: a fresh reader ranks as the service does.
    from uhdsearch.index import open_index
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.types import Query

    reader = open_index(segmented)
    assert reader.n_segments <= 2 and reader.generation == final["generation"]
    run = Searcher(served_encoder, reader).search([Query("q", query)], 20)
    assert [(h.doc_id, pytest.approx(h.score)) for h in run["q"]] == [(d, s) for d, s in _ranking(final)]


def test_a_write_waits_for_a_merge_being_published_but_not_for_another_write(live, mini_data):
    """While a merge publisher holds the write lock (its commit), a client's write waits for it instead of
    getting 409; while another client's write holds it, 409 at once."""
    service = live.app.state.service
    body = {"documents": _documents(mini_data, 300, 301)}

    def hold(seconds):
        with service._write_lock:
            held.set()
            threading.Event().wait(seconds)

    for publishing, status in ((True, 200), (False, 409)):
        held = threading.Event()
        service._publishers = int(publishing)
        holder = threading.Thread(target=hold, args=(0.5,))
        holder.start()
        assert held.wait(10)
        response = live.post("/documents", json={**body, "replace": True}, headers=KEY)
        holder.join()
        assert response.status_code == status, response.text
    service._publishers = 0
