"""The added documents' texts belong to the index commit that publishes them: never a text without its vector,
never a vector without its text, and each snapshot shows the texts of its own commit."""
from __future__ import annotations

import errno
import json

import pytest

pytest.importorskip("fastapi")

from uhdsearch.index.live import commit as cp  # noqa: E402
from uhdsearch.serving.documents import ADDED_FILE  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.types import Document  # noqa: E402

KEY = {"Authorization": "Bearer s3cret"}


def _line(doc_id, text, generation):
    return json.dumps({"_id": doc_id, "title": text.title(), "text": text, "generation": generation}) + "\n"


def test_texts_of_a_commit_that_never_finished_are_ignored_then_cut(segmented, served_encoder, mini_data):
    """What a kill between a commit's texts and its commit file leaves: lines tagged with a generation that no
    commit on disk reaches. A reader skips them and leaves the file alone; the writer cuts them off."""
    first = list(mini_data.corpus)[0]
    generation = cp.list_generations(segmented)[0]
    store = segmented / ADDED_FILE
    committed = _line(first, "old text", generation)
    store.write_text(committed + _line(first, "new text", generation + 1) + _line("ghost", "boo", generation + 1),
                     encoding="utf-8")
    reader = SearchService.open(served_encoder, segmented, None, writable=False)
    assert reader.document(first).text == "old text" and reader.document("ghost") is None
    assert reader.snapshot.texts.get("ghost") is None
    assert store.read_text(encoding="utf-8").count("\n") == 3  # a reader never cuts what a writer may append
    writer = SearchService.open(served_encoder, segmented, None)
    try:
        assert store.read_text(encoding="utf-8") == committed
        assert writer.document(first).text == "old text"
        new = list(mini_data.corpus.values())[-1]
        writer.add([new], commit=True)  # the next commit takes the generation the unfinished one had
        assert writer.snapshot.generation == generation + 1
        assert writer.document(new.doc_id).text == new.text and writer.snapshot.texts.get("ghost") is None
        rows = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines()]
        assert [(r["_id"], r["generation"]) for r in rows] == [(first, generation), (new.doc_id, generation + 1)]
    finally:
        writer.close()


def test_a_commit_that_fails_before_its_commit_file_takes_its_texts_back(live, mini_data, monkeypatch):
    store = live.app.state.service.writer.path / ADDED_FILE
    before = live.get("/health").json()
    new = [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in list(mini_data.corpus.values())[-2:]]
    assert live.post("/documents", json={"documents": new}, headers=KEY).status_code == 200
    write_commit, calls = cp.write_commit, []

    def disk_full_once(directory, body):
        calls.append(body["generation"])
        if len(calls) == 1:
            assert new[0]["doc_id"] in store.read_text(encoding="utf-8")  # staged: the texts come first
            raise OSError(errno.ENOSPC, "No space left on device")
        write_commit(directory, body)

    monkeypatch.setattr(cp, "write_commit", disk_full_once)
    with pytest.raises(OSError, match="No space"):
        live.app.state.service.commit()  # what POST /commit runs (answered 500)
    assert not store.exists() or new[0]["doc_id"] not in store.read_text(encoding="utf-8")
    assert live.get("/health").json()["generation"] == before["generation"]
    assert live.get(f"/documents/{new[0]['doc_id']}").status_code == 404
    done = live.post("/commit", headers=KEY).json()
    assert calls == [done["generation"]] * 2
    assert live.get(f"/documents/{new[0]['doc_id']}").json()["text"] == new[0]["text"]
    rows = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines()]
    assert [(r["_id"], r["generation"]) for r in rows] == [(d["doc_id"], done["generation"]) for d in new]


def test_each_snapshot_shows_the_texts_of_its_own_commit(live, mini_data):
    """A search that took the snapshot before a commit replaced a document shows the old text with the old
    vector, never the new text over it."""
    service = live.app.state.service
    doc_id = list(mini_data.corpus)[0]
    old = service.snapshot
    assert service.document(doc_id, old).text == mini_data.corpus[doc_id].text
    service.add([Document(doc_id, "a brand new text", "New")], replace=True)
    assert service.document(doc_id).title == mini_data.corpus[doc_id].title  # pending: the old one still
    service.commit()
    assert service.document(doc_id).text == "a brand new text"
    assert service.document(doc_id, old).text == mini_data.corpus[doc_id].text
    hit = live.get("/search", params={"q": "a brand new text", "k": 300}).json()["results"][0]["hits"]
    assert {h["doc_id"]: h["title"] for h in hit}.get(doc_id) == "New"
