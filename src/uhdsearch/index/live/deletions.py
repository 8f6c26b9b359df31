"""Deletion bookkeeping of a segmented index writer: where each live doc_id is, and copy-on-write deletion masks."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from uhdsearch.errors import IndexFormatError
from uhdsearch.index.live import commit as cp
from uhdsearch.index.live.additions import PendingAdditions


class LiveDocuments:
    """Where each live doc_id is: a row of a written segment, or among the pending additions (`added`).

    The map of written segments is built on first use and must be dropped (`forget`) whenever segment
    positions change; deletions and flushes keep it current.
    """

    def __init__(self, directory: Path) -> None:
        self.added = PendingAdditions()
        self._directory = directory
        self._where: dict[str, tuple[int, int]] | None = None  # doc_id -> (segment position, row)

    def present(self, segments: Sequence[cp.Segment], doc_ids: Iterable[str]) -> list[str]:
        """The ids in `doc_ids` that are live, in their order."""
        where = self._locations(segments)
        return [d for d in doc_ids if d in where or d in self.added]

    def delete(self, segments: Sequence[cp.Segment], doc_ids: Iterable[str]) -> None:
        """Delete live documents (see `present`): drop pending ones, mark written ones in their segment's mask."""
        where = self._locations(segments)
        for d in doc_ids:
            if not self.added.discard(d):
                position, row = where.pop(d)
                mark_deleted(segments[position], row)

    def flushed(self, position: int, doc_ids: Sequence[str]) -> None:
        """The pending additions were written as the segment at `position`, rows in the order of `doc_ids`."""
        if self._where is not None:  # other segments keep their positions: no need to rebuild the map
            self._where.update((d, (position, row)) for row, d in enumerate(doc_ids))

    def forget(self) -> None:
        """Segment positions changed: rebuild the map on next use."""
        self._where = None

    def _locations(self, segments: Sequence[cp.Segment]) -> dict[str, tuple[int, int]]:
        if self._where is None:
            self._where = locate_live(segments, self._directory)
        return self._where


def locate_live(segments: Sequence[cp.Segment], directory: Path) -> dict[str, tuple[int, int]]:
    """doc_id -> (position in `segments`, row) of every document not deleted.

    Raises:
        IndexFormatError: a doc_id is live in two segments.
    """
    where: dict[str, tuple[int, int]] = {}
    for position, s in enumerate(segments):
        for row, (d, gone) in enumerate(zip(s.index.doc_ids, s.deleted.tolist())):
            if gone:
                continue
            if d in where:
                other = segments[where[d][0]].name
                raise IndexFormatError(f"doc_id {d!r} is live in both {other} and {s.name} of "
                                       f"{directory}: the index is corrupted")
            where[d] = (position, row)
    return where


def mark_deleted(segment: cp.Segment, row: int) -> None:
    """Delete one row of a segment; its mask is copied first if it is still the committed one."""
    if not segment.dirty:  # copy on write: the committed mask may be shared with a search in progress
        segment.deleted = segment.deleted.copy()
        segment.dirty = True
    segment.deleted[row] = True
    segment.n_deleted += 1


def visible_doc_ids(segments: Sequence[cp.Segment], added: Iterable[str]) -> list[str | None]:
    """External id per global doc number (segments in order, then `added`); None where deleted."""
    out: list[str | None] = []
    for s in segments:
        out.extend(None if gone else d for d, gone in zip(s.index.doc_ids, s.deleted.tolist()))
    out.extend(added)
    return out
