"""Admission control: overload gets 503 with Retry-After at once, never more computing threads than workers, the
deadline is on the queue wait (started work runs to completion), a write past the deadline is not half-done,
a slow body gets 408."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

KEY = {"X-API-Key": "s3cret"}
QUERY = "vitamin d deficiency and bone density"


class Computing:
    """Wraps a service method (and, given `gauge`, shares its count): counts the threads inside any of them (the
    peak), each staying `seconds` longer."""

    def __init__(self, method, seconds: float, gauge: Computing | None = None) -> None:
        self.method, self.seconds = method, seconds
        self.gauge = gauge or self
        self.inside, self.peak, self.threads, self.finished = {}, 0, set(), 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        gauge, me = self.gauge, threading.get_ident()
        with gauge.lock:
            gauge.inside[me] = gauge.inside.get(me, 0) + 1
            gauge.peak = max(gauge.peak, len(gauge.inside))
            gauge.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.seconds)
            return self.method(*args, **kwargs)
        finally:
            with gauge.lock:
                gauge.inside[me] -= 1
                if not gauge.inside[me]:
                    del gauge.inside[me]
                self.finished += 1


class CountedEncoder:
    """The real encoder whose every encoding counts as computing, in the searches' gauge."""

    def __init__(self, encoder, gauge: Computing) -> None:
        self._encoder = encoder
        self.encode = Computing(encoder.encode, 0.05, gauge)

    def __getattr__(self, name):
        return getattr(self._encoder, name)


def _wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _client(service, **settings) -> TestClient:
    return TestClient(create_app(service, ServeSettings(api_key="s3cret", **settings)), base_url="http://localhost")


def _at_once(client, n: int, call) -> list:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: call(client, i), range(n)))


def _search(client, i):
    return client.get("/search", params={"q": f"{QUERY} {i}"})


@pytest.mark.parametrize("workers", [1, 2])
def test_overload_gets_503_with_retry_after_and_never_more_computing_threads_than_workers(served, served_encoder,
                                                                                         workers):
    service = SearchService.open(served_encoder, served / "index", None)
    service.search = computing = Computing(service.search, 0.5)
    service.query_encoder = counted = CountedEncoder(served_encoder, computing)  # batched encodings compute too
    with _client(service, workers=workers, max_queue=1, queue_timeout_s=30) as client:
        assert client.app.state.ready.wait(60)
        ended = {}

        def timed(c, i):
            response = _search(c, i)
            ended[i] = time.monotonic()
            return response

        answers = _at_once(client, 10, timed)
        quick = [r for r in answers if r.status_code == 503]
        assert {r.status_code for r in answers} == {200, 503}
        assert all(r.headers["retry-after"] == "1" and "busy" in r.json()["error"] for r in quick)
        assert workers <= sum(r.status_code == 200 for r in answers) <= 10 - len(quick)
        assert computing.peak == workers and len(computing.threads) <= workers
        assert counted.encode.finished >= 2  # the warm-up's, then the requests' in batches
        assert all(name.startswith("uhdsearch-compute") for name in computing.threads)
        assert len([t for t in threading.enumerate() if t.name.startswith("uhdsearch-compute")]) <= workers
        # The refused ones did not wait their turn: answered before the last admitted one.
        assert max(ended[i] for i, r in enumerate(answers) if r.status_code == 503) < \
            max(ended[i] for i, r in enumerate(answers) if r.status_code == 200)
        assert client.get("/health").status_code == 200  # the event loop answers meanwhile


def test_the_deadline_is_on_the_wait_not_on_work_that_started(served, served_encoder):
    service = SearchService.open(served_encoder, served / "index", None)
    service.search = computing = Computing(service.search, 1.0)
    with _client(service, workers=1, max_queue=8, queue_timeout_s=0.3) as client:
        answers = _at_once(client, 3, _search)
    assert sorted(r.status_code for r in answers) == [200, 503, 503]
    assert all("within 0.3 s" in r.json()["error"] for r in answers if r.status_code == 503)
    assert computing.finished == 1  # only the admitted one computed, for 1 s > the deadline, and answered 200


def test_a_write_past_the_deadline_is_not_half_done(segmented, served_encoder, mini_data):
    service = SearchService.open(served_encoder, segmented, None)
    service.search = searching = Computing(service.search, 1.0)
    service.add = adding = Computing(service.add, 0.6)
    new = [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in list(mini_data.corpus.values())[-4:]]
    with _client(service, workers=1, max_queue=8, queue_timeout_s=0.3) as client:
        generation = client.get("/health").json()["generation"]
        with ThreadPoolExecutor(3) as pool:
            busy = pool.submit(_search, client, 0)
            _wait_until(lambda: searching.inside)  # the search holds the only worker for 1 s
            late = [pool.submit(client.post, "/documents", json={"documents": new[:2]}, headers=KEY),
                    pool.submit(client.post, "/commit", headers=KEY)]
            assert busy.result().status_code == 200
            assert [f.result().status_code for f in late] == [503, 503]
            assert all(f.result().headers["retry-after"] for f in late)
        assert adding.finished == 0 and service._pending == []
        assert client.get("/health").json()["generation"] == generation
        # A write that starts takes longer than the deadline and still finishes whole.
        done = client.post("/documents", json={"documents": new[2:]}, headers=KEY)
        assert done.status_code == 200 and len(service._pending) == 2
        assert client.post("/commit", headers=KEY).json()["n_documents"] == 302


def test_work_still_running_at_shutdown_finishes_and_is_committed(segmented, served_encoder, mini_data):
    """A real uvicorn server stopped while a write computes: the write ends, its client gets the answer, and what it
    added is committed at shutdown. (Starlette's TestClient cannot stand in here: a response still being sent
    when its portal stops is left waiting for a reader that has gone, and the test hangs.)"""
    import requests
    import uvicorn

    service = SearchService.open(served_encoder, segmented, None)
    service.add = adding = Computing(service.add, 1.0)
    new = [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in list(mini_data.corpus.values())[-1:]]
    app = create_app(service, ServeSettings(api_key="s3cret", workers=1))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           timeout_graceful_shutdown=30))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    _wait_until(lambda: server.started and server.servers)
    port = server.servers[0].sockets[0].getsockname()[1]
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(requests.post, f"http://127.0.0.1:{port}/documents", json={"documents": new},
                             headers={**KEY, "Host": "localhost"}, timeout=60)
        _wait_until(lambda: adding.inside)
        server.should_exit = True  # as at SIGTERM
        assert answer.result().status_code == 200
    serving.join(60)
    assert not serving.is_alive() and adding.finished == 1 and service.writer is None
    # ... and what it added was committed at shutdown, as pending changes are unless --discard-pending
    again = SearchService.open(served_encoder, segmented, None, writable=False)
    assert again.document(new[0]["doc_id"]) is not None and again.snapshot.index.n_documents == 301


def test_discard_pending_drops_uncommitted_changes_at_shutdown(segmented, served_encoder, mini_data):
    service = SearchService.open(served_encoder, segmented, None)
    new = [{"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in list(mini_data.corpus.values())[-1:]]
    with _client(service, commit_at_shutdown=False) as client:
        assert client.post("/documents", json={"documents": new}, headers=KEY).json()["pending_changes"] == 1
    again = SearchService.open(served_encoder, segmented, None, writable=False)
    assert again.document(new[0]["doc_id"]) is None and again.snapshot.index.n_documents == 300


def test_a_body_that_arrives_too_slowly_gets_408(served, served_encoder):
    app = create_app(SearchService.open(served_encoder, served / "index", None), ServeSettings(body_timeout_s=0.2))
    sent = []

    async def slow_body():
        await asyncio.sleep(1.0)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/search", "raw_path": b"/search", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"), (b"content-length", b"2")],
             "client": ("127.0.0.1", 1), "server": ("localhost", 80)}
    started = time.monotonic()
    asyncio.run(app(scope, slow_body, send))
    assert sent[0]["status"] == 408 and time.monotonic() - started < 0.9
    assert b"0.2 s" in b"".join(m.get("body", b"") for m in sent[1:])
