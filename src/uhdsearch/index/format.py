"""index_meta.json schema, file names and version checks. The only module that knows index file names."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from uhdsearch._version import __version__
from uhdsearch.errors import DataFormatError, IndexFormatError
from uhdsearch.io import read_json

FORMAT = "uhd-index"
FORMAT_VERSION = 2  # 2: bitmaps + bit-packed blocks (codec.py); 1 stored plain int32 postings
META_FILE = "index_meta.json"
DOC_IDS_FILE = "doc_ids.txt"
Variant = Literal["binary", "weighted"]
VARIANTS = ("binary", "weighted")
VERIFY_LIMIT_BYTES = 128 * 1024 * 1024  # checksum on load up to this size unless asked (~0.2 s of SHA-256)


BUCKET_ARRAYS = ("indptr", "bitmap_rows", "bitmaps", "block_ptr", "payload_ptr", "blocks", "payload")


def bucket_files(bucket: int, variant: Variant) -> dict[str, str]:
    """Array name -> file name for one bucket (layout: uhdsearch.index.codec), plus weights if weighted."""
    names = BUCKET_ARRAYS + (("weights",) if variant == "weighted" else ())
    return {name: f"bucket_{bucket}.{name}.npy" for name in names}


def all_files(n_buckets: int, variant: Variant) -> list[str]:
    names = [DOC_IDS_FILE]
    for b in range(n_buckets):
        names.extend(bucket_files(b, variant).values())
    return names


def check_doc_ids(doc_ids: Sequence[str]) -> None:
    """Refuse ids that the index or the project's outputs cannot hold, before anything is encoded or written.

    Raises:
        DataFormatError: a duplicate id, or an empty id or one with whitespace (TREC runs and doc_ids.txt are
            whitespace- and line-separated); names the id and its position.
    """
    seen: set[str] = set()
    for i, d in enumerate(doc_ids):
        if not d or any(c.isspace() for c in d):
            raise DataFormatError(f"doc_id {d!r} (document {i}) is empty or contains whitespace; TREC runs "
                                  "cannot hold it: give every document an id without spaces")
        if d in seen:
            raise DataFormatError(f"duplicate doc_id {d!r}: every document needs a unique id")
        seen.add(d)


def read_doc_ids(path: Path, n_documents: int) -> list[str]:
    """The ids of doc_ids.txt, one per line; IndexFormatError naming the file and line when it is not UTF-8 or
    does not hold `n_documents` ids."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise IndexFormatError(f"{path}:{line}: byte {raw[exc.start]:#04x} is not valid UTF-8; the index is "
                               "corrupted") from None
    doc_ids = text.split("\n")[:-1]
    if len(doc_ids) != n_documents:
        raise IndexFormatError(f"{path} has {len(doc_ids)} ids but the manifest says {n_documents}")
    return doc_ids


def file_digest(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_meta(
    variant: Variant, dim: int, n_buckets: int, n_documents: int, encoder_digest: str | None, directory: Path,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    files = {name: {"bytes": (directory / name).stat().st_size, "sha256": file_digest(directory / name)}
             for name in all_files(n_buckets, variant)}
    meta = {
        "format": FORMAT,
        "variant": variant,
        "format_version": FORMAT_VERSION,
        "dim": dim,
        "n_buckets": n_buckets,
        "n_documents": n_documents,
        "encoder_digest": encoder_digest,
        "uhdsearch_version": __version__,
        "files": files,
    }
    meta.update(extra or {})
    return meta


def read_meta(directory: Path, verify: bool | None = None) -> dict[str, Any]:
    """Read and check index_meta.json and the sizes (and, when asked or small, checksums) of every file.

    Raises:
        FileNotFoundError: no such directory.
        IndexFormatError: no meta, foreign format, newer version, missing, truncated or altered files.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"no index directory at {directory}")
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise IndexFormatError(f"not a uhdsearch index: {directory} has no {META_FILE}")
    try:
        meta = read_json(meta_path)
    except ValueError as exc:
        raise IndexFormatError(f"{exc}; the index is corrupted") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise IndexFormatError(f"{meta_path}: format is {found!r}; this version reads {FORMAT!r} indexes")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{meta_path}: format_version {version!r} is not supported (this uhdsearch reads up to "
            f"{FORMAT_VERSION}); upgrade uhdsearch or rebuild the index"
        )
    if version < FORMAT_VERSION:
        raise IndexFormatError(
            f"{meta_path}: format_version {version} (uncompressed postings) is no longer read; this uhdsearch "
            f"reads version {FORMAT_VERSION}: rebuild the index (uhdsearch index ...)"
        )
    if meta.get("variant") not in VARIANTS:
        raise IndexFormatError(f"{meta_path}: variant {meta.get('variant')!r} is not one of {VARIANTS}")
    for key in ("dim", "n_buckets", "n_documents"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise IndexFormatError(f"{meta_path}: {key} is {meta.get(key)!r}, expected a non-negative integer")
    files = meta.get("files") or {}
    if not isinstance(files, dict):
        raise IndexFormatError(f"{meta_path}: 'files' should map file names to sizes and checksums")
    if meta["n_buckets"] > len(files):  # each bucket has files in the manifest: a huge count is damage
        raise IndexFormatError(f"{meta_path}: n_buckets is {meta['n_buckets']} but 'files' lists {len(files)} files")
    expected = all_files(meta["n_buckets"], meta["variant"])
    total = 0
    for name in expected:
        path = directory / name
        if not path.is_file():
            raise IndexFormatError(f"index file {path} is missing; the index is incomplete")
        if name not in files:
            raise IndexFormatError(f"{meta_path} does not list {name}")
        size = path.stat().st_size
        total += size
        entry = files[name]
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or "sha256" not in entry:
            raise IndexFormatError(f"{meta_path}: the entry for {name} is malformed ({entry!r})")
        if size != entry["bytes"]:
            raise IndexFormatError(
                f"index file {path} has {size} bytes, the manifest says {files[name]['bytes']}: truncated or altered"
            )
    if verify is None:
        verify = total <= VERIFY_LIMIT_BYTES
    if verify:
        for name in expected:
            if file_digest(directory / name) != files[name]["sha256"]:
                raise IndexFormatError(f"index file {directory / name} fails its checksum: corrupted or altered")
    return meta
