"""ServeSettings: the limits of every request and who may write."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from uhdsearch.errors import UsageError
from uhdsearch.serving.keys import ApiKey

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


@dataclass(frozen=True)
class ServeSettings:
    """Limits (422 when a field is over, 413 when the body, the batch or the response would be) and the write token.

    Attributes:
        max_hits: hits in one response, queries x k (64 x 1,000 hits with snippets would be ~25 MB).
        max_candidates: doc_ids to re-rank per query (POST /search `candidates`).
        max_query_k: `query_k` (0 keeps every active dimension, the most there is).
        max_bucket_weight: the largest |bucket weight|; larger ones can overflow float32 scores to inf.
        max_title_chars, max_text_chars: per added document.
        api_key: token for POST/DELETE on documents and POST /commit (a str is wrapped in an ApiKey, which never
            shows it); None: writes are off. `uhdsearch serve` always gives one unless --read-only.
        loopback: the server listens on a loopback address only: then requests must name a loopback Host
            (a DNS-rebinding page names its own).
        workers: requests that encode or search at the same time; the rest wait their turn. More compute
            threads than cores only fight for them (and each may hold a malloc arena).
        max_queue: requests waiting for a worker; one more gets 503 with Retry-After at once.
        queue_timeout_s: the longest a request waits for a worker (then 503 with Retry-After); work that has
            started is never cut off: it runs to completion and holds its worker.
        body_timeout_s: the longest a request body may take to arrive (then 408).
        commit_at_shutdown: a graceful shutdown commits the changes still pending (False: drops them).
        encode_batch, encode_wait_s: concurrent requests' queries are encoded together (batching.py): a batch
            gathers for up to `encode_wait_s`, and on while it waits for a worker, up to `encode_batch` queries.
        explain_cache: documents whose token winners /explain keeps (explain.py WinnersCache; 0: none).
    """

    max_query_chars: int = 2_000
    max_k: int = 1_000
    max_batch: int = 64
    max_body_bytes: int = 1_048_576
    max_documents_per_add: int = 256
    max_hits: int = 10_000
    max_candidates: int = 1_000
    max_query_k: int = 10_000
    max_bucket_weight: float = 1_000.0
    max_title_chars: int = 1_000
    max_text_chars: int = 100_000
    workers: int = 2
    max_queue: int = 64
    queue_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    encode_batch: int = 32
    encode_wait_s: float = 0.003
    explain_cache: int = 512
    commit_at_shutdown: bool = True
    snippet_chars: int = 240
    api_key: ApiKey | str | None = field(default=None, repr=False)
    loopback: bool = True

    def __post_init__(self) -> None:
        for name in ("max_query_chars", "max_k", "max_batch", "max_body_bytes", "max_documents_per_add",
                     "max_hits", "max_candidates", "max_query_k", "max_title_chars", "max_text_chars", "workers",
                     "snippet_chars", "encode_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"{name}={value!r} must be a positive integer")
        if not 0 < self.max_bucket_weight < float("inf"):
            raise UsageError(f"max_bucket_weight={self.max_bucket_weight!r} must be a positive number")
        for name in ("queue_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name}={getattr(self, name)!r} must be positive")
        if not 0 <= self.encode_wait_s <= 1:
            raise UsageError(f"encode_wait_s={self.encode_wait_s!r} must be between 0 and 1 second")
        if not isinstance(self.explain_cache, int) or self.explain_cache < 0:
            raise UsageError(f"explain_cache={self.explain_cache!r} must be 0 or a positive integer")
        if not isinstance(self.max_queue, int) or self.max_queue < 0:
            raise UsageError(f"max_queue={self.max_queue!r} must be 0 or a positive integer")
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", ApiKey(self.api_key))

    @property
    def allowed_hosts(self) -> list[str]:
        """Host header values served (Starlette's TrustedHostMiddleware): loopback names on loopback, else any."""
        return list(LOOPBACK_HOSTS) if self.loopback else ["*"]

    def write_refusal(self, token: str | None) -> tuple[int, str] | None:
        """(status, message) when a write with this token must be refused; None when it may go on."""
        if self.api_key is None:
            return 403, "writes are off: the server has no API key (uhdsearch serve makes one unless --read-only)"
        if token is None:
            return 401, "this write needs the API key (header 'Authorization: Bearer KEY' or 'X-API-Key')"
        if not self.api_key.matches(token):
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
