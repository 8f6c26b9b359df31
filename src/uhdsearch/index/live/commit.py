"""Commit points of a segmented index: file names, checksummed commit files, deletion bitsets, and opening the
newest commit that validates (the write lock is in lock.py).

A commit `commit_<generation>.json` names the segments and the deletion file of each; it is the only thing a
reader trusts. Everything else in the directory that no commit names is a leftover of an interrupted write
(found and removed by `uhdsearch.index.live.leftovers`).

Directory layout:
    commit_<generation>.json   the segments, their deletion files, doc counts, a checksum of itself
    seg_<n>/                   one immutable index directory as written by `InvertedIndex.from_encoding`
    seg_<n>.del_<generation>.npy   packed-bit deletion mask of seg_<n>, a new file per generation
    write.lock                 held (fcntl) by the single writer
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch._version import __version__
from uhdsearch.errors import IndexFormatError
from uhdsearch.index import format as fmt
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.live.lock import LOCK_FILE, WriteLock
from uhdsearch.io import atomic_write_text, load_npy, save_npy
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)

FORMAT = "uhd-segmented-index"
FORMAT_VERSION = 1
OPEN_RETRIES = 5  # a concurrent writer may remove an old commit while a reader is opening it
COMMIT_PATTERN = re.compile(r"commit_(\d+)\.json")
SEGMENT_PATTERN = re.compile(r"seg_(\d+)")
DELETIONS_PATTERN = re.compile(r"seg_(\d+)\.del_(\d+)\.npy")
# Temporary names made by io.atomic_write_text / atomic_directory for our own files.
TEMPORARY_PATTERN = re.compile(r"\.(commit_\d+\.json|seg_\d+)\.(tmp|old)-.*")


def commit_name(generation: int) -> str:
    return f"commit_{generation}.json"


def commit_exists(index_dir: str | os.PathLike, generation: int) -> bool:
    """Whether the commit point of `generation` was written in the segmented index at `index_dir` (a commit that
    failed may have failed before or after it)."""
    return (Path(index_dir) / commit_name(generation)).exists()


def segment_name(number: int) -> str:
    return f"seg_{number}"


def deletions_name(segment: str, generation: int) -> str:
    return f"{segment}.del_{generation}.npy"


def list_generations(directory: Path) -> list[int]:
    """Generations of every commit file in `directory`, newest first (valid or not)."""
    found = (COMMIT_PATTERN.fullmatch(p.name) for p in directory.iterdir())
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def max_segment_number(directory: Path) -> int:
    """Highest segment number on disk (committed or leftover), -1 if none."""
    numbers = [int(m.group(1)) for p in directory.iterdir() if (m := SEGMENT_PATTERN.fullmatch(p.name))]
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
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
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
    _check_body(body, path)
    return body


def _count(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_body(body: dict[str, Any], path: Path) -> None:
    """Every field a reader or the garbage collector uses, with its type and range (the checksum covers only
    torn or altered files, not a writer that wrote wrong values)."""
    def bad(field: str, expected: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: {field} should be {expected}; the commit is corrupted")

    if body.get("variant") not in fmt.VARIANTS:
        raise bad("variant", f"one of {fmt.VARIANTS}, not {body.get('variant')!r}")
    for field, minimum in (("dim", 1), ("n_buckets", 1), ("next_segment", 0), ("n_documents", 0)):
        if not _count(body.get(field), minimum):
            raise bad(field, f"an integer >= {minimum}, not {body.get(field)!r}")
    if not isinstance(body.get("encoder_digest"), (str, type(None))):
        raise bad("encoder_digest", "a string or null")
    if not isinstance(body.get("segments"), list):
        raise bad("segments", "a list")
    for i, entry in enumerate(body["segments"]):
        where = f"segments[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or \
                not SEGMENT_PATTERN.fullmatch(entry["name"]):
            raise bad(f"{where}.name", "seg_<number>")
        if not _count(entry.get("n_documents")) or not _count(entry.get("n_deleted")) or \
                entry["n_deleted"] > entry["n_documents"]:
            raise bad(f"{where}.n_documents and n_deleted", "integers with 0 <= n_deleted <= n_documents")
        if not isinstance(entry.get("meta_sha256"), str):
            raise bad(f"{where}.meta_sha256", "a string")
        deletions = entry.get("deletions")
        if deletions is not None and not (
                isinstance(deletions, dict) and isinstance(deletions.get("file"), str)
                and isinstance(deletions.get("sha256"), str)
                and (m := DELETIONS_PATTERN.fullmatch(deletions["file"]))
                and f"seg_{m.group(1)}" == entry["name"]):
            raise bad(f"{where}.deletions", f"null or {{file: {entry['name']}.del_<generation>.npy, sha256}}")


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


def save_changed_deletions(directory: Path, segment: Segment, generation: int) -> None:
    """Give a segment whose deletions changed a new deletion file of this generation (none if nothing is deleted)."""
    if segment.dirty:
        segment.deletions = None
        if segment.n_deleted:
            file = deletions_name(segment.name, generation)
            segment.deletions = {"file": file, "sha256": write_deletions(directory / file, segment.deleted)}


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
    if n_documents % 8 and packed[-1] & (0xFF >> (n_documents % 8)):
        raise IndexFormatError(f"deletion file {path} sets bits past the last document ({n_documents}) in its "
                               "padding; the index is corrupted")
    return np.unpackbits(packed, count=n_documents).astype(np.bool_)


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


@dataclass
class Segment:
    """One immutable segment as a commit names it, with its current deletion mask."""

    name: str
    index: InvertedIndex
    deleted: np.ndarray  # (n_documents,) bool; replaced, never modified, once committed
    deletions: dict[str, str] | None  # {"file", "sha256"} of the committed deletion file
    meta_sha256: str
    dirty: bool = False  # deletions changed since the last commit
    n_deleted: int = 0  # deleted.sum(), kept so that searches never scan the mask for it

    @property
    def n_live(self) -> int:
        return self.index.n_documents - self.n_deleted


def segment_entry(segment: Segment) -> dict[str, Any]:
    """How a commit file names a segment; `_load_segments` reads it back."""
    return {"name": segment.name, "n_documents": segment.index.n_documents, "n_deleted": segment.n_deleted,
            "meta_sha256": segment.meta_sha256, "deletions": segment.deletions}


def write_next_commit(
    directory: Path, previous: dict[str, Any], segments: Sequence[Segment], next_segment: int,
    before_publish: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], list[Segment]]:
    """Write the commit after `previous`: new deletion files, then commit_<generation>.json, durably.

    Segments with no live document are dropped. `before_publish(generation)` runs between the two (see
    `SegmentedIndex.commit`). Returns the new commit's body and the segments it names, all marked clean. Never
    reuses a generation on disk, not even that of a corrupt commit file.
    """
    generation = max(list_generations(directory)[:1] + [previous["generation"]]) + 1
    kept = [s for s in segments if s.n_live > 0]
    for s in kept:
        save_changed_deletions(directory, s, generation)
    layout = {key: previous[key] for key in ("variant", "dim", "n_buckets", "encoder_digest")}
    body = {"generation": generation, **layout, "next_segment": next_segment,
            "n_documents": sum(s.n_live for s in kept), "segments": [segment_entry(s) for s in kept]}
    if before_publish is not None:
        before_publish(generation)
    write_commit(directory, body)
    for s in kept:
        s.dirty = False
    return body, kept


def create_directory(directory: Path, body: dict[str, Any]) -> WriteLock:
    """Make `directory` a new index whose first commit is `body`; returns the write lock, held.

    A directory that holds only a lock file and temporaries is a create() that was killed before its first
    commit: it is created again (its temporaries removed under the lock).

    Raises:
        FileExistsError: `directory` exists and is not empty.
    """
    if directory.exists() and any(_not_from_create(p) for p in directory.iterdir()):
        raise FileExistsError(f"{directory} already exists and is not empty; choose a new path or "
                              "open it with SegmentedIndex.open")
    directory.mkdir(parents=True, exist_ok=True)
    lock = WriteLock(directory)
    try:
        for p in directory.iterdir():
            if TEMPORARY_PATTERN.fullmatch(p.name):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        write_commit(directory, body)
    except BaseException:
        lock.release()
        raise
    return lock


def _not_from_create(p: Path) -> bool:
    return p.name != LOCK_FILE and not TEMPORARY_PATTERN.fullmatch(p.name)


def write_segment(
    directory: Path, index_class: type[InvertedIndex], encoding: SparseEncoding, doc_ids: list[str],
    encoder_digest: str | None,
) -> Segment:
    """Write a new segment (no deletions) durably into `directory`, which must not exist yet."""
    index = index_class.from_encoding(encoding, doc_ids, directory, encoder_digest=encoder_digest)
    fsync_tree(directory)
    return Segment(directory.name, index, np.zeros(len(doc_ids), np.bool_), None, sha256(directory / fmt.META_FILE))


def open_newest(
    directory: Path, mmap: bool | None, verify: bool | None, loaded: Sequence[Segment] = ()
) -> tuple[dict[str, Any], list[Segment]]:
    """The newest commit whose files all validate, and its segments; older ones with a warning.

    Segments in `loaded` (of an earlier open) whose index_meta.json checksum is unchanged are reused, not reloaded.

    Raises:
        IndexFormatError: no commit file, or none that validates.
    """
    for _ in range(OPEN_RETRIES):
        generations = list_generations(directory)
        if not generations:
            if directory.is_dir() and not any(_not_from_create(p) for p in directory.iterdir()):
                raise IndexFormatError(f"{directory} has no commit yet: its SegmentedIndex.create was interrupted "
                                       "before the first commit; call SegmentedIndex.create on it again")
            raise IndexFormatError(f"not a segmented uhdsearch index: {directory} has no commit_<generation>.json "
                                   "(a plain index directory opens with InvertedIndex.load)")
        problems = []
        for generation in generations:
            try:
                body = read_commit(directory, generation)
                segments = _load_segments(directory, body, mmap, verify, {s.name: s for s in loaded})
            except (FileNotFoundError, IndexFormatError) as exc:
                problems.append(f"{commit_name(generation)}: {exc}")
                continue
            if not problems:
                return body, segments
            if list_generations(directory) == generations:  # really damaged, not a race with a writer
                warnings.warn(f"skipped newer commits of {directory} that do not validate "
                              f"({'; '.join(problems)}); opened generation {generation}", stacklevel=3)
                return body, segments
            break  # a writer committed and removed files meanwhile: start again
        else:
            if list_generations(directory) == generations:
                raise IndexFormatError(f"no valid commit in {directory}: {'; '.join(problems)}")
    raise IndexFormatError(f"{directory} kept changing while it was being opened; try again")


def _load_segments(
    directory: Path, body: dict[str, Any], mmap: bool | None, verify: bool | None, loaded: dict[str, Segment]
) -> list[Segment]:
    where = directory / commit_name(body["generation"])
    try:
        entries = list(body["segments"])
        variant, dim, n_buckets = body["variant"], body["dim"], body["n_buckets"]
        body["next_segment"], body["encoder_digest"]  # noqa: B018 - presence check
    except (KeyError, TypeError) as exc:
        raise IndexFormatError(f"{where} lacks field {exc}; it was not written by uhdsearch") from exc
    segments = []
    for entry in entries:
        try:
            name, n_documents, n_deleted = entry["name"], entry["n_documents"], entry["n_deleted"]
            meta_sha256, deletions = entry["meta_sha256"], entry["deletions"]
        except (KeyError, TypeError) as exc:
            raise IndexFormatError(f"{where}: a segment entry lacks {exc}") from exc
        segment_dir = directory / name
        if sha256(segment_dir / fmt.META_FILE) != meta_sha256:
            raise IndexFormatError(f"{segment_dir / fmt.META_FILE} is not the one {where.name} names: altered")
        if name in loaded and loaded[name].meta_sha256 == meta_sha256:
            index = loaded[name].index  # segments are immutable: same manifest, same files
        else:
            index = InvertedIndex.load(segment_dir, mmap=mmap, verify=verify)
        if (index.variant, index.dim, index.n_buckets, index.n_documents) != (variant, dim, n_buckets, n_documents):
            raise IndexFormatError(
                f"segment {segment_dir} is {index.variant} dim={index.dim} n_buckets={index.n_buckets} with "
                f"{index.n_documents} documents; {where.name} expects {variant} dim={dim} n_buckets={n_buckets} "
                f"with {n_documents}"
            )
        if deletions:
            deleted = read_deletions(directory / deletions["file"], n_documents, deletions["sha256"])
        else:
            deleted = np.zeros(n_documents, np.bool_)
        if int(deleted.sum()) != n_deleted:
            raise IndexFormatError(f"{where.name}: {name} should have {n_deleted} deletions, its file has "
                                   f"{int(deleted.sum())}")
        segments.append(Segment(name, index, deleted, deletions, meta_sha256, n_deleted=n_deleted))
    return segments
