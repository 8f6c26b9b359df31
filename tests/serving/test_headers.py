"""Security headers on every response, a page that needs nothing inline or from elsewhere, no CDN-backed /docs."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.serving.app import STATIC_DIR, create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402


@pytest.fixture(scope="module")
def client(served, served_encoder):
    app = create_app(SearchService.open(served_encoder, served / "index", None), ServeSettings())
    with TestClient(app, base_url="http://localhost") as c:
        yield c


@pytest.mark.parametrize(("url", "status"), [
    ("/", 200), ("/static/app.js", 200), ("/static/style.css", 200), ("/search?q=vitamin", 200),
    ("/health", 200), ("/openapi.json", 200), ("/search", 422), ("/no-such-page", 404),
])
def test_every_response_carries_the_security_headers(client, url, status):
    response = client.get(url)
    assert response.status_code == status
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


def test_a_refused_host_gets_them_too(client):
    response = TestClient(client.app, base_url="http://attacker.example").get("/")
    assert response.status_code == 400 and response.headers["x-content-type-options"] == "nosniff"


def test_no_docs_pages_that_load_from_a_cdn(client):
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert "/search" in client.get("/openapi.json").json()["paths"]


def test_the_page_needs_nothing_inline_or_from_elsewhere():
    for path in STATIC_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"https?://", text), path  # every resource from this server
        assert not re.search(r"\sstyle=|\son[a-z]+=|javascript:", text), path  # inline style or handlers
        assert "setAttribute(\"style\"" not in text and "innerHTML" not in text, path
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert all('src="/static/' in tag for tag in re.findall(r"<script[^>]*>", html))
