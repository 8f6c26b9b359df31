"""open_index(path): the one place that tells the kinds of index on disk apart and opens each.

Kinds: "binary" and "weighted" (a static InvertedIndex: index_meta.json), "planes" (impact planes, a binary index
whose manifest says so), "segmented" (commit files: live additions and deletions) and "shards" (shard_<i>
directories, each a static index, written by `serve --shards`; they are searched on Ray actors, scale/shards.py).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from uhdsearch.errors import IndexFormatError
from uhdsearch.index import format as fmt
from uhdsearch.index.base import SearchableIndex

KINDS = ("binary", "weighted", "planes", "segmented", "shards")
SHARD_PATTERN = re.compile(r"shard_(\d+)")


def index_kind(path: str | os.PathLike) -> str:
    """What `path` holds: one of KINDS.

    Raises:
        FileNotFoundError: no directory at `path`.
        IndexFormatError: a directory that holds no index.
    """
    from uhdsearch.index.impacts import META_KEY
    from uhdsearch.index.live.commit import list_generations
    from uhdsearch.io import read_json

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no index directory at {path}")
    if list_generations(path):
        return "segmented"
    if (path / fmt.META_FILE).is_file():
        meta = read_json(path / fmt.META_FILE)
        return "planes" if META_KEY in meta else str(meta.get("variant", "binary"))
    if shard_dirs(path):
        return "shards"
    raise IndexFormatError(f"{path} holds no index: no {fmt.META_FILE}, no commit files, no shard_<i> directories")


def shard_dirs(path: str | os.PathLike) -> list[Path]:
    """The shard_<i> directories of a sharded index, in shard order ([] when `path` holds none)."""
    found = [(int(m.group(1)), p) for p in Path(path).iterdir() if p.is_dir() and (m := SHARD_PATTERN.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def open_index(path: str | os.PathLike, writable: bool = False, mmap: bool | None = None,
               verify: bool | None = None) -> SearchableIndex:
    """The index at `path`, whatever its kind: an InvertedIndex, its ImpactPlanes, or a SegmentedIndex (its writer
    when `writable`: it takes the write lock).

    Raises:
        UsageError: `writable` for a static index, or a sharded one (open it through scale.shards.ShardedIndex).
        IndexLockedError: `writable` and another writer holds the lock.
    """
    from uhdsearch.errors import UsageError

    kind = index_kind(path)
    if kind == "segmented":
        from uhdsearch.index.live.segments import SegmentedIndex

        return SegmentedIndex.open(path, writable=writable, mmap=mmap, verify=verify)
    if kind == "shards":
        raise UsageError(f"{path} holds {len(shard_dirs(path))} shards of an index (`serve --shards` wrote them); "
                         "serve the index they came from with --shards, or open one shard_<i> directory")
    if writable:
        raise UsageError(f"{path} is a static {kind} index; only a segmented index takes writes")
    from uhdsearch.index.impacts import ImpactPlanes
    from uhdsearch.index.inverted import InvertedIndex

    index = InvertedIndex.load(path, mmap=mmap, verify=verify)
    return ImpactPlanes.of_index(index) if kind == "planes" else index
