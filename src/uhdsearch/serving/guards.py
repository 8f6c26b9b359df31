"""Who may write, and what every response tells a browser: the write checks, the Host check, security headers.

A write (POST/DELETE /documents, POST /commit) needs the API key, and is refused when it comes from another
site (an `Origin` or `Sec-Fetch-Site` that is not this server's: a web page the user opened) or carries a body
that is not JSON (a plain HTML form can post `text/plain` or form data without a CORS preflight). On loopback,
every request must name a loopback Host (Starlette's TrustedHostMiddleware), which DNS rebinding cannot.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import FastAPI, Header, Request
from starlette.middleware.trustedhost import TrustedHostMiddleware

from uhdsearch.serving.service import ServiceError
from uhdsearch.serving.settings import ServeSettings

# The page loads its script and style from /static only; nothing inline, nothing from elsewhere, never framed.
CONTENT_SECURITY_POLICY = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def add_guards(app: FastAPI, settings: ServeSettings) -> None:
    """The Host check (loopback names only, on loopback), then the security headers on every response."""
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts, www_redirect=False)
    app.add_middleware(_SecurityHeaders)


def write_guard(settings: ServeSettings, impossible=lambda: None):
    """A route dependency: raises ServiceError (403 other site, 415 not JSON, `impossible()`'s (status, reason)
    when the index takes no writes, 401/403 key) unless the write may go on."""

    async def guard(request: Request, authorization: str | None = Header(None, include_in_schema=False),
                    x_api_key: str | None = Header(None, include_in_schema=False)) -> None:
        refusal = cross_site_refusal(request) or content_type_refusal(request) or impossible()
        if refusal is None:
            token = x_api_key
            if token is None and authorization is not None and authorization.lower().startswith("bearer "):
                token = authorization[7:].strip()
            refusal = settings.write_refusal(token)
        if refusal is not None:
            raise ServiceError(*refusal)

    return guard


def cross_site_refusal(request: Request) -> tuple[int, str] | None:
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site in ("cross-site", "same-site"):
        return 403, f"writes from another site are refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's cross-origin request (curl, scripts, same-origin GET-style)
        return None
    netloc = urlsplit(origin).netloc.lower() if origin != "null" else ""
    if netloc != request.headers.get("host", "").lower():
        return 403, f"writes from another origin are refused (Origin: {origin[:100]})"
    return None


def content_type_refusal(request: Request) -> tuple[int, str] | None:
    content_type = request.headers.get("content-type")
    if content_type is None:
        has_body = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
        return (415, "a write with a body needs 'Content-Type: application/json'") if has_body else None
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        return 415, f"writes take 'Content-Type: application/json', not {content_type[:100]!r}"
    return None


class _SecurityHeaders:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in SECURITY_HEADERS if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, sending)
