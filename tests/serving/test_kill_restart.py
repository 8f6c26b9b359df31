"""SIGKILL the real `uhdsearch serve` process at the points where a write can be cut (after an add before its
commit, inside a commit before and after its commit file, during a background merge), restart it, and check that
it serves exactly a committed state: the last acknowledged commit (or the one whose file was written), the ranking
a fresh reader of the index gives, and the added texts of that commit and of no other.

The pause points are the real functions wrapped by pausing_server.py; nothing of the server is replaced.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from tests.serving.server_process import free_port, start_server, stop, wait_ready  # noqa: E402

from uhdsearch.serving.documents import ADDED_FILE  # noqa: E402
from uhdsearch.serving.keys import API_KEY_ENV  # noqa: E402

pytestmark = pytest.mark.slow  # five server starts: ~1-2 min on a busy 2-core machine
KEY = {"X-API-Key": "s3cret"}
QUERY = "vitamin d and bone density"


class Served:
    """One run of the real server over `index_dir`, started through the pausing launcher."""

    def __init__(self, index_dir: Path, model_dir: Path, pause_dir: Path, *extra: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.pause_dir = pause_dir
        self.process = start_server(index_dir, model_dir, self.port, "--typical-sample", "0", *extra,
                                    env={API_KEY_ENV: "s3cret"}, pause_dir=pause_dir)

    def ready(self) -> Served:
        wait_ready(self.base, self.process)
        return self

    def get(self, path: str, **params) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", params=params, timeout=60)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", headers=KEY, timeout=120, **kwargs)

    def add(self, documents: list[dict], commit: bool = False) -> dict:
        response = self.post("/documents", params={"commit": str(commit).lower()}, json={"documents": documents})
        assert response.status_code == 200, response.text
        return response.json()

    def kill_at(self, point: str, request) -> None:
        """Arm `point`, send `request` (it never gets its answer), SIGKILL the server once it pauses there."""
        (self.pause_dir / point).touch()
        if request is not None:
            threading.Thread(target=_ignore_errors, args=(request,), daemon=True).start()
        deadline = time.monotonic() + 240
        while not (self.pause_dir / "paused").exists():
            assert time.monotonic() < deadline and self.process.poll() is None, f"never paused at {point}"
            time.sleep(0.1)
        self.kill()
        for name in (point, "paused"):
            (self.pause_dir / name).unlink()

    def kill(self) -> None:
        stop(self.process)  # SIGKILL


def _ignore_errors(call) -> None:
    try:
        call()
    except httpx.HTTPError:
        pass  # the connection dies with the server


def _documents(mini_data, start: int, stop_: int) -> list[dict]:
    return [{"doc_id": d.doc_id, "title": d.title, "text": d.text}
            for d in list(mini_data.corpus.values())[start:stop_]]


def check_committed(server: Served, index_dir: Path, served_encoder, generation: int, texts: dict[str, dict],
                    absent: list[dict]) -> None:
    """The server serves generation `generation`, ranks as a fresh reader of the index does, shows the text of
    every added document in `texts`, knows nothing of `absent`, and the store on disk holds exactly `texts`."""
    from uhdsearch.index import open_index
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.types import Query

    health = server.get("/health").json()
    reader = open_index(index_dir)
    assert health["generation"] == reader.generation == generation, (health, reader)
    assert health["n_documents"] == reader.n_documents == 300 + len(texts)
    assert health["pending_changes"] == 0
    hits = server.get("/search", q=QUERY, k=20).json()["results"][0]["hits"]
    expected = Searcher(served_encoder, reader).search([Query("q", QUERY)], 20)["q"]
    assert [h["doc_id"] for h in hits] == [s.doc_id for s in expected]
    assert [h["score"] for h in hits] == pytest.approx([s.score for s in expected], rel=1e-5)
    for doc_id, document in texts.items():
        shown = server.get(f"/documents/{doc_id}").json()
        assert (shown["title"], shown["text"]) == (document["title"], document["text"])
    for document in absent:
        assert server.get(f"/documents/{document['doc_id']}").status_code == 404
    store = index_dir / ADDED_FILE
    rows = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines()] if store.exists() else []
    assert {r["_id"] for r in rows} == set(texts) and all(r["generation"] <= generation for r in rows)


def test_kills_of_the_real_server_leave_exactly_a_committed_state(segmented, served, served_encoder, mini_data,
                                                                 tmp_path):
    model, pause_dir = served / "model", tmp_path / "pause"
    pause_dir.mkdir()
    first, second = _documents(mini_data, 300, 303), _documents(mini_data, 303, 306)
    committed = {}
    server = Served(segmented, model, pause_dir).ready()
    try:
        start = server.get("/health").json()["generation"]
        # 1. acknowledged adds, one commit; then an add that is never committed: killed before its commit.
        generation = server.add(first, commit=True)["generation"]
        committed.update({d["doc_id"]: d for d in first})
        assert server.add(second)["committed"] is False
        assert generation == start + 1
        server.kill()
        server = Served(segmented, model, pause_dir).ready()
        check_committed(server, segmented, served_encoder, generation, committed, second)

        # 2. killed inside the commit: segment and texts written, the commit file not.
        server.add(second)
        server.kill_at("before-commit-file", lambda: server.post("/commit"))
        server = Served(segmented, model, pause_dir).ready()
        check_committed(server, segmented, served_encoder, generation, committed, second)

        # 3. killed inside the commit after its commit file: the commit counts, texts and all (never answered).
        server.add(second)
        server.kill_at("after-commit-file", lambda: server.post("/commit"))
        server = Served(segmented, model, pause_dir).ready()
        generation += 1
        committed.update({d["doc_id"]: d for d in second})
        check_committed(server, segmented, served_encoder, generation, committed, [])
        assert server.get("/health").json()["n_segments"] == 3
        server.kill()

        # 4. --max-segments 2 merges the three segments at start; killed during the merge, then merged for good.
        server = Served(segmented, model, pause_dir, "--max-segments", "2")
        server.kill_at("merge", None)
        server = Served(segmented, model, pause_dir, "--max-segments", "2").ready()
        deadline = time.monotonic() + 120
        while (health := server.get("/health").json())["n_segments"] > 2 or health["merging"]:
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
        generation += 1  # the merge's own commit
        check_committed(server, segmented, served_encoder, generation, committed, [])
        assert sorted(p.name for p in segmented.iterdir() if p.name.startswith((".seg", ".commit"))) == []
    finally:
        output = stop(server.process)
    assert "Traceback" not in output, output
