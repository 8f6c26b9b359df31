"""Leftovers of interrupted writes in a segmented index directory: the files no commit names, and removing them."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Collection
from pathlib import Path

from uhdsearch.errors import IndexFormatError
from uhdsearch.index.live import commit as cp

logger = logging.getLogger(__name__)

_OURS = (cp.COMMIT_PATTERN, cp.SEGMENT_PATTERN, cp.DELETIONS_PATTERN, cp.TEMPORARY_PATTERN)


def leftovers(directory: Path, keep: set[str], being_written: Collection[str] = ()) -> list[Path]:
    """Our own files and directories in `directory` that no kept commit names (never foreign files).

    Segments named in `being_written` (a background merge's output) are spared, temporary directories included.
    """
    out = []
    for p in directory.iterdir():
        ours = any(r.fullmatch(p.name) for r in _OURS)
        if ours and p.name not in keep and _segment_on_disk(p.name) not in being_written:
            out.append(p)
    return out


def segment_paths(directory: Path, names: Collection[str]) -> list[Path]:
    """The directories of these segments in `directory`, and the temporary ones they are being written through."""
    return [p for p in directory.iterdir() if _segment_on_disk(p.name) in names]


def _segment_on_disk(name: str) -> str | None:
    """The segment a directory entry is or becomes: "seg_7" for seg_7 and for .seg_7.tmp-x1y2."""
    if cp.SEGMENT_PATTERN.fullmatch(name):
        return name
    temporary = cp.TEMPORARY_PATTERN.fullmatch(name)
    return temporary.group(1) if temporary and cp.SEGMENT_PATTERN.fullmatch(temporary.group(1)) else None


def referenced_by_any_commit(directory: Path) -> set[str]:
    """Files named by every commit that parses: what a writer must not remove when it opens."""
    keep: set[str] = set()
    for generation in cp.list_generations(directory):
        try:
            keep |= cp.referenced_files(cp.read_commit(directory, generation))
        except (FileNotFoundError, IndexFormatError, KeyError, TypeError):
            keep.add(cp.commit_name(generation))  # left for inspection; the next commit removes it
    return keep


def remove(paths: list[Path]) -> None:
    """Delete leftovers (files or segment directories)."""
    # Commit files first, so that no commit ever names a file that is already gone.
    for p in sorted(paths, key=lambda p: not p.name.startswith("commit_")):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        logger.debug("removed leftover %s", p)
