"""Writes closed unless opened: the key (generated, from a file, from the environment), other sites' requests,
non-JSON bodies and foreign Host names refused, the key in no repr, log line or error; a real `uhdsearch serve`."""
from __future__ import annotations

import json
import logging
import stat

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from tests.serving.server_process import free_port, start_server, stop, wait_ready  # noqa: E402
from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.keys import API_KEY_ENV, KEY_FILE, ApiKey, resolve_api_key  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

KEY = {"Authorization": "Bearer s3cret"}


def _one(mini_data) -> dict:
    d = list(mini_data.corpus.values())[-1]
    return {"documents": [{"doc_id": d.doc_id, "title": d.title, "text": d.text}]}


def _pending(client) -> int:
    return len(client.app.state.service._pending)


@pytest.mark.parametrize(("headers", "status", "words"), [
    # a plain HTML form on another site, posting to the loopback server: no preflight, the user's browser sends it
    ({"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, 403, "origin"),
    ({"Origin": "null", "Content-Type": "application/json"}, 403, "origin"),
    ({"Origin": "http://localhost:9999", "Content-Type": "application/json"}, 403, "origin"),
    ({"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 403, "another site"),
    ({"Content-Type": "text/plain"}, 415, "application/json"),  # a no-cors fetch's default
    ({}, 415, "Content-Type"),  # a body and no Content-Type at all
])
def test_writes_from_other_sites_or_without_json_are_refused_even_with_the_key(live, mini_data, headers, status,
                                                                               words):
    body = json.dumps(_one(mini_data)).encode()
    before = live.get("/health").json()["generation"]
    response = live.post("/documents", content=body, headers={**KEY, **headers})
    assert response.status_code == status, response.text
    assert words.lower() in response.json()["error"].lower()
    form = live.post("/commit", content=b"a=1", headers={**KEY, **headers})
    assert form.status_code == status
    assert _pending(live) == 0 and live.get("/health").json()["generation"] == before


def test_same_origin_json_writes_with_the_key_go_through(live, mini_data):
    same = {**KEY, "Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    assert live.post("/documents", json=_one(mini_data), headers=same).status_code == 200
    assert live.post("/commit", headers=same).status_code == 200  # no body: no Content-Type needed
    assert live.get("/health").json()["n_documents"] == 301


def test_a_foreign_host_on_loopback_is_refused(live, mini_data):
    rebound = TestClient(live.app, base_url="http://attacker.example:8000")  # DNS rebinding: the page's own name
    assert rebound.get("/health").status_code == 400
    assert rebound.post("/documents", json=_one(mini_data), headers=KEY).status_code == 400
    assert _pending(live) == 0
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
        assert live.get("/health", headers={"Host": host}).status_code == 200, host


def test_beyond_loopback_any_host_is_served(segmented, served_encoder):
    app = create_app(SearchService.open(served_encoder, segmented, None, writable=False),
                     ServeSettings(loopback=False))
    with TestClient(app, base_url="http://search.example") as client:
        assert client.get("/health").status_code == 200


def test_a_generated_key_is_0600_printed_by_serve_and_in_no_log_line(tmp_path, caplog, segmented, served_encoder,
                                                                    mini_data):
    caplog.set_level(logging.DEBUG)
    key, path = resolve_api_key(segmented, None, None, environ={})
    assert path == segmented / KEY_FILE and stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().strip()
    assert key.matches(secret) and len(secret) >= 32
    assert resolve_api_key(segmented, None, None, environ={})[0] != key  # a new key at every start
    settings = ServeSettings(api_key=key)
    app = create_app(SearchService.open(served_encoder, segmented, None), settings)
    with TestClient(app, base_url="http://localhost") as client:
        answers = [client.post("/documents", json=_one(mini_data), headers={"X-API-Key": secret[:-1]}),
                   client.post("/commit", headers={"Authorization": f"Bearer {secret}x"}),
                   client.post("/documents", json={"documents": []}, headers={"X-API-Key": secret}),
                   client.post("/documents", json=_one(mini_data), headers={"X-API-Key": secret}),
                   client.post("/commit", headers={"X-API-Key": secret})]
        assert [a.status_code for a in answers] == [401, 401, 422, 200, 200]
        metrics = client.get("/metrics").text
    shown = [repr(settings), str(settings), repr(key), str(key), metrics, caplog.text,
             *(a.text for a in answers), *(str(r.args) for r in caplog.records)]
    assert not any(secret in text for text in shown)
    with pytest.raises(TypeError):
        json.dumps(settings.__dict__)  # an ApiKey is no plain value that could be dumped by accident


def test_keys_from_a_file_the_environment_or_the_command_line(tmp_path, caplog):
    from uhdsearch.errors import UsageError

    (tmp_path / "key").write_text("from-file\n")
    assert resolve_api_key(tmp_path, None, tmp_path / "key", {API_KEY_ENV: "env"}) == (ApiKey("from-file"), None)
    assert resolve_api_key(tmp_path, None, None, {API_KEY_ENV: "env"}) == (ApiKey("env"), None)
    caplog.set_level(logging.WARNING)
    assert resolve_api_key(tmp_path, "typed", None, {API_KEY_ENV: "env"}) == (ApiKey("typed"), None)
    assert "visible" in caplog.text and "typed" not in caplog.text
    assert not (tmp_path / KEY_FILE).exists()
    for args, words in [(("typed", tmp_path / "key"), "not both"), ((None, tmp_path / "missing"), "missing"),
                        ((None, tmp_path / "empty"), "empty")]:
        (tmp_path / "empty").write_text(" \n")
        with pytest.raises(UsageError, match=words):
            resolve_api_key(tmp_path, *args, environ={})
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(ApiKey("x"))


def test_the_real_server_refuses_writes_without_the_key_or_from_another_origin(segmented, served, mini_data):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_server(segmented, served / "model", port, "--typical-sample", "0", env={API_KEY_ENV: ""})
    try:
        wait_ready(base, process)
        secret = (segmented / KEY_FILE).read_text().strip()
        before = httpx.get(f"{base}/health").json()["generation"]
        body = _one(mini_data)
        assert httpx.post(f"{base}/documents", json=body).status_code == 401
        foreign = httpx.post(f"{base}/commit", headers={"Origin": "http://evil.example", "X-API-Key": secret,
                                                        "Content-Type": "application/x-www-form-urlencoded"},
                             content=b"x=1")
        assert foreign.status_code == 403
        assert httpx.post(f"{base}/commit", headers={"Host": "evil.example", "X-API-Key": secret}).status_code == 400
        assert httpx.get(f"{base}/health").json()["generation"] == before
        assert httpx.post(f"{base}/documents", json=body, headers={"X-API-Key": secret}).status_code == 200
        assert httpx.post(f"{base}/commit", headers={"X-API-Key": secret}).json()["n_documents"] == 301
    finally:
        output = stop(process)
    assert output.count(secret) == 1 and "mode 0600" in output  # printed once, at start
    (segmented / KEY_FILE).unlink()
    process = start_server(segmented, served / "model", port, "--typical-sample", "0", "--read-only")
    try:
        wait_ready(base, process)
        refused = httpx.post(f"{base}/documents", json=body, headers={"X-API-Key": secret})
        assert refused.status_code == 423 and "read-only" in refused.json()["error"]
        assert httpx.get(f"{base}/health").json()["writes"] is False
    finally:
        stop(process)
    assert not (segmented / KEY_FILE).exists()
