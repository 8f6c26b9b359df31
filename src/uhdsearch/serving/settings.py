"""ServeSettings: the limits of every request and who may write."""
from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from uhdsearch.errors import UsageError

API_KEY_ENV = "UHDSEARCH_API_KEY"


@dataclass(frozen=True)
class ServeSettings:
    """Limits (422 when a field is over, 413 when the body or the batch is) and the write token.

    Attributes:
        api_key: token for POST/DELETE on documents and POST /commit; None: writes need none on loopback and are
            refused elsewhere.
        loopback: the server listens on a loopback address only.
        workers: requests that encode or search at the same time; the rest wait their turn (inside their
            timeout). More compute threads than cores only fight for them (and each may hold a malloc arena).
    """

    max_query_chars: int = 2_000
    max_k: int = 1_000
    max_batch: int = 64
    max_body_bytes: int = 1_048_576
    max_documents_per_add: int = 256
    request_timeout_s: float = 30.0
    workers: int = 2
    snippet_chars: int = 240
    api_key: str | None = None
    loopback: bool = True

    def __post_init__(self) -> None:
        for name in ("max_query_chars", "max_k", "max_batch", "max_body_bytes", "max_documents_per_add",
                     "workers", "snippet_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"{name}={value!r} must be a positive integer")
        if not self.request_timeout_s > 0:
            raise UsageError(f"request_timeout_s={self.request_timeout_s!r} must be positive")
        if self.api_key is not None and not self.api_key.strip():
            raise UsageError("the API key is empty; give a token or none")

    def write_refusal(self, token: str | None) -> tuple[int, str] | None:
        """(status, message) when a write with this token must be refused; None when it may go on."""
        if self.api_key is None:
            if self.loopback:
                return None
            return 403, "writes are off: the server listens beyond loopback without --api-key"
        if token is None:
            return 401, "this write needs the API key (header 'Authorization: Bearer KEY' or 'X-API-Key')"
        # Constant time: the comparison must not tell how many leading characters were right.
        if not hmac.compare_digest(token.encode("utf-8"), self.api_key.encode("utf-8")):
            return 401, "wrong API key"
        return None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'; anything else (0.0.0.0, a LAN address, a name) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
