"""The write key of `uhdsearch serve`: from a file, the environment or the command line, or generated at start.

A writable service always has a key. When none is given, one is generated, written (mode 0600) to
`<index>/serve-api-key` and printed once; clients read it from there. The key never appears in a repr, a log line
or an error message: `ApiKey` hides it everywhere but in `matches`.
"""
from __future__ import annotations

import hmac
import logging
import os
import secrets
from pathlib import Path

from uhdsearch.errors import UsageError

logger = logging.getLogger(__name__)

API_KEY_ENV = "UHDSEARCH_API_KEY"
KEY_FILE = "serve-api-key"


class ApiKey:
    """A secret token; compares in constant time and shows as `ApiKey(***)`."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str) -> None:
        secret = secret.strip()
        if not secret:
            raise UsageError("the API key is empty; give a token or none")
        self._secret = secret

    def matches(self, token: str | None) -> bool:
        # Constant time: the comparison must not tell how many leading characters were right.
        return token is not None and hmac.compare_digest(token.encode("utf-8"), self._secret.encode("utf-8"))

    def reveal(self) -> str:
        """The token itself, for the one place that shows it: the start-up message of a generated key."""
        return self._secret

    def __repr__(self) -> str:
        return "ApiKey(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and self.matches(other._secret)

    def __hash__(self) -> int:
        return hash(ApiKey)

    def __reduce__(self):
        raise TypeError("an ApiKey is not pickled (it would leave the process)")

    def __copy__(self) -> ApiKey:
        return self

    def __deepcopy__(self, memo) -> ApiKey:  # dataclasses.asdict(settings) keeps the same hidden key
        return self


def resolve_api_key(index_dir: Path, api_key: str | None, api_key_file: Path | None,
                    environ: dict[str, str] | None = None) -> tuple[ApiKey, Path | None]:
    """The key a writable service uses, and the file it was written to when generated (else None).

    Order: `--api-key-file`, then `--api-key` (warns: the command line is visible in `ps`), then
    UHDSEARCH_API_KEY, then a new key written to `<index_dir>/serve-api-key` with mode 0600.
    """
    environ = os.environ if environ is None else environ
    if api_key is not None and api_key_file is not None:
        raise UsageError("give --api-key or --api-key-file, not both")
    if api_key_file is not None:
        try:
            text = Path(api_key_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--api-key-file {api_key_file}: {exc.strerror or exc}") from None
        if not text.strip():
            raise UsageError(f"--api-key-file {api_key_file} is empty")
        return ApiKey(text), None
    if api_key is not None:
        logger.warning("--api-key on the command line is visible to every user of this machine (ps); prefer "
                       "--api-key-file or %s", API_KEY_ENV)
        return ApiKey(api_key), None
    if environ.get(API_KEY_ENV, "").strip():
        return ApiKey(environ[API_KEY_ENV]), None
    key = ApiKey(secrets.token_urlsafe(32))
    path = Path(index_dir) / KEY_FILE
    write_key_file(path, key)
    return key, path


def write_key_file(path: Path, key: ApiKey) -> None:
    """Atomically, readable by its owner only (0600), also while it is written."""
    from uhdsearch.io.files import atomic_write_text

    previous = os.umask(0o077)  # start-up, before any other thread writes files
    try:
        atomic_write_text(path, key.reveal() + "\n")
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)  # whatever mode the atomic write gave the file
