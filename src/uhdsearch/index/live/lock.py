"""The single-writer lock of a segmented index: an advisory fcntl lock on <index>/write.lock."""
from __future__ import annotations

import errno
import fcntl
from pathlib import Path

from uhdsearch.errors import IndexLockedError

LOCK_FILE = "write.lock"


class WriteLock:
    """Exclusive advisory lock on <index>/write.lock (fcntl.flock); released on `release` or process death."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._file = None
        try:
            self._file = open(self.path, "a+b")  # noqa: SIM115 - held open for the lock's lifetime
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise IndexLockedError(f"{directory} is not writable ({exc.strerror}), so it cannot be changed; open "
                                   "it read-only (writable=False), which needs no lock file") from None
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._file.close()
            raise IndexLockedError(
                f"{directory} is being written by another writer (it holds {self.path}); close that writer "
                "first, or open the index read-only (writable=False)"
            ) from exc

    def __del__(self) -> None:
        self.release()

    def release(self) -> None:
        if self._file is not None and not self._file.closed:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
