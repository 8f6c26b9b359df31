"""Commit points of a segmented index: file names, checksummed commit files, deletion bitsets, the write lock.

A commit `commit_<generation>.json` names the segments and the deletion file of each; it is the only thing a
reader trusts. Everything else in the directory that no commit names is a leftover of an interrupted write.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch._version import __version__
from uhdsearch.errors import IndexFormatError, UhdError
from uhdsearch.index import format as fmt
from uhdsearch.io import atomic_write_text, load_npy, save_npy

FORMAT = "uhd-segmented-index"
FORMAT_VERSION = 1
LOCK_FILE = "write.lock"
_COMMIT = re.compile(r"commit_(\d+)\.json")
_SEGMENT = re.compile(r"seg_(\d+)")
_DELETIONS = re.compile(r"seg_(\d+)\.del_(\d+)\.npy")
# Temporary names made by io.atomic_write_text / atomic_directory for our own files.
_TEMPORARY = re.compile(r"\.(commit_\d+\.json|seg_\d+)\.(tmp|old)-.*")


class IndexLockedError(UhdError):
    """Another writer holds the index's write lock."""


def commit_name(generation: int) -> str:
    return f"commit_{generation}.json"


def segment_name(number: int) -> str:
    return f"seg_{number}"


def deletions_name(segment: str, generation: int) -> str:
    return f"{segment}.del_{generation}.npy"


def list_generations(directory: Path) -> list[int]:
    """Generations of every commit file in `directory`, newest first (valid or not)."""
    found = (_COMMIT.fullmatch(p.name) for p in directory.iterdir())
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def max_segment_number(directory: Path) -> int:
    """Highest segment number on disk (committed or leftover), -1 if none."""
    numbers = [int(m.group(1)) for p in directory.iterdir() if (m := _SEGMENT.fullmatch(p.name))]
    return max(numbers, default=-1)


def sha256(path: Path) -> str:
    return fmt.file_digest(path)


def _body_digest(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def write_commit(directory: Path, body: dict[str, Any]) -> None:
    """Write commit_<generation>.json durably: temp file + fsync + rename, then fsync the directory."""
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "uhdsearch_version": __version__, **body}
    text = json.dumps({**body, "checksum": _body_digest(body)}, indent=1) + "\n"
    atomic_write_text(directory / commit_name(body["generation"]), text)
    fsync_directory(directory)


def read_commit(directory: Path, generation: int) -> dict[str, Any]:
    """Parse and check one commit file.

    Raises:
        FileNotFoundError: the file is gone (a writer removed an old commit).
        IndexFormatError: not JSON, checksum mismatch (truncated or bit-flipped), foreign or newer format.
    """
    path = directory / commit_name(generation)
    raw = path.read_bytes()
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexFormatError(f"{path} is not valid JSON ({exc}): truncated or corrupted") from exc
    if not isinstance(body, dict) or "checksum" not in body:
        raise IndexFormatError(f"{path} has no checksum: not a commit file of a segmented uhdsearch index")
    checksum = body.pop("checksum")
    if checksum != _body_digest(body):
        raise IndexFormatError(f"{path} fails its checksum: corrupted or altered")
    if body.get("format") != FORMAT:
        raise IndexFormatError(f"{path}: format is {body.get('format')!r}; this version reads {FORMAT!r}")
    if not isinstance(body.get("format_version"), int) or body["format_version"] > FORMAT_VERSION:
        raise IndexFormatError(f"{path}: format_version {body.get('format_version')!r} is not supported (this "
                               f"uhdsearch reads up to {FORMAT_VERSION}); upgrade uhdsearch")
    if body.get("generation") != generation:
        raise IndexFormatError(f"{path} says it is generation {body.get('generation')!r}")
    return body


def referenced_files(body: dict[str, Any]) -> set[str]:
    """Names (relative to the index directory) that a commit needs, itself included."""
    names = {commit_name(body["generation"])}
    for entry in body.get("segments", []):
        names.add(entry["name"])
        if entry.get("deletions"):
            names.add(entry["deletions"]["file"])
    return names


def write_deletions(path: Path, deleted: np.ndarray) -> str:
    """Write a (n,) bool mask as packed bits, fsynced; returns its SHA-256. The name is new per generation,
    so nothing is ever overwritten: an interrupted write is a leftover no commit names."""
    save_npy(path, np.packbits(deleted.astype(np.bool_)))
    fsync_file(path)
    return sha256(path)


def read_deletions(path: Path, n_documents: int, digest: str) -> np.ndarray:
    """(n_documents,) bool mask from a deletion file whose SHA-256 must be `digest`.

    Raises:
        FileNotFoundError, IndexFormatError: missing, truncated or altered file.
    """
    if sha256(path) != digest:
        raise IndexFormatError(f"deletion file {path} fails its checksum: truncated or altered")
    try:
        packed = load_npy(path)
    except ValueError as exc:
        raise IndexFormatError(f"deletion file {path} is not a valid .npy array: {exc}") from exc
    if packed.dtype != np.uint8 or packed.shape != ((n_documents + 7) // 8,):
        raise IndexFormatError(f"deletion file {path} should be ({(n_documents + 7) // 8},) uint8, got "
                               f"{packed.shape} {packed.dtype}")
    return np.unpackbits(packed, count=n_documents).astype(np.bool_)


def leftovers(directory: Path, keep: set[str]) -> list[Path]:
    """Our own files and directories in `directory` that no kept commit names (never foreign files)."""
    out = []
    for p in directory.iterdir():
        ours = any(r.fullmatch(p.name) for r in (_COMMIT, _SEGMENT, _DELETIONS, _TEMPORARY))
        if ours and p.name not in keep:
            out.append(p)
    return out


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse fsync on directories
        fsync_file(path)


def fsync_tree(path: Path) -> None:
    """fsync every file of a freshly written segment directory, then the directory (np.save does not)."""
    for p in path.iterdir():
        if p.is_file():
            fsync_file(p)
    fsync_directory(path)


class WriteLock:
    """Exclusive advisory lock on <index>/write.lock (fcntl.flock); released on `release` or process death."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._file = open(self.path, "a+b")  # noqa: SIM115 - held open for the lock's lifetime
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
        if not self._file.closed:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
