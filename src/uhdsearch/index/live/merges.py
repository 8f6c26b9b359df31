"""Which segments to merge, and merges that run in a worker thread (Lucene's ConcurrentMergeScheduler).

A background merge reads a snapshot of its source segments' deletion masks, writes the merged segment under a
name reserved up front, and never touches the writer's state: the writer swaps the result in later
(`BackgroundMerge.swap_into`), carrying over the deletions made meanwhile (Lucene's commitMerge).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.live import commit as cp
from uhdsearch.index.live.leftovers import remove, segment_paths
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)

MergeState = Literal["running", "finished", "applied", "discarded", "failed", "cancelled"]


def choose_groups(segments: Sequence[cp.Segment], max_segments: int) -> list[list[int]]:
    """Positions in `segments` (all with live documents) to merge, one list per merged segment.

    With more segments than `max_segments`, the contiguous run with the fewest live documents becomes one
    (contiguous, so the global order of documents is kept); otherwise each segment with deletions is rewritten.
    """
    if len(segments) > max_segments:
        width = len(segments) - max_segments + 1
        live = np.array([s.n_live for s in segments])
        costs = np.convolve(live, np.ones(width, np.int64), mode="valid")  # live docs per window
        start = int(np.argmin(costs))
        return [list(range(start, start + width))]
    return [[i] for i, s in enumerate(segments) if s.n_deleted]


def live_documents(group: Sequence[cp.Segment], masks: Sequence[np.ndarray]) -> tuple[SparseEncoding, list[str]]:
    """The vectors and ids of the rows not deleted in `masks`, segment after segment."""
    encodings, ids = [], []
    for s, mask in zip(group, masks):
        rows = np.flatnonzero(~mask)
        encodings.append(s.index.document_vectors()[rows])
        ids.extend(s.index.doc_ids[r] for r in rows)
    return SparseEncoding.concat(encodings), ids


def merge_segments(
    segments: Sequence[cp.Segment], max_segments: int,
    write_segment: Callable[[SparseEncoding, list[str]], cp.Segment],
) -> list[cp.Segment]:
    """Merge now: the segments with live documents, each group `choose_groups` picks replaced by one new segment.

    `write_segment(encoding, doc_ids)` writes a merged segment; the merged one takes its first source's place.
    """
    segments = [s for s in segments if s.n_live > 0]
    replaced: dict[int, cp.Segment | None] = {}
    for group in choose_groups(segments, max_segments):
        sources = [segments[i] for i in group]
        merged = write_segment(*live_documents(sources, [s.deleted for s in sources]))
        replaced.update({i: None for i in group})
        replaced[group[0]] = merged
    out = [replaced.get(i, s) for i, s in enumerate(segments)]
    return [s for s in out if s is not None]


def start_background_merge(
    directory: Path, segments: Sequence[cp.Segment], max_segments: int, first_number: int,
    index_class: type[InvertedIndex], encoder_digest: str | None,
) -> BackgroundMerge:
    """A background merge of the groups `choose_groups` picks, written as seg_<first_number>, seg_<first_number + 1>...

    Its state is "applied" at once when there is nothing to merge.
    """
    segments = [s for s in segments if s.n_live > 0]
    groups = [[segments[i] for i in group] for group in choose_groups(segments, max_segments)]
    names = [cp.segment_name(first_number + i) for i in range(len(groups))]
    return BackgroundMerge(directory, groups, names, index_class, encoder_digest)


def positive_int(value, name: str, allow_none: bool = False) -> int | None:
    """`value` as an int after checking it is a positive integer (or None when `allow_none`)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name}={value!r} must be a positive integer" + (" or None" if allow_none else ""))
    return int(value)


class _Cancelled(Exception):
    pass


class BackgroundMerge:
    """A merge running in a worker thread; the writer's next `commit()` after it finishes swaps it in.

    Attributes:
        sources: names of the segments being merged.
        merged: names reserved for the merged segments (one per group of sources).
        error: the exception that made the merge fail, or None.
    """

    def __init__(
        self, directory: Path, groups: list[list[cp.Segment]], merged: list[str], index_class: type[InvertedIndex],
        encoder_digest: str | None,
    ) -> None:
        self.sources = tuple(s.name for group in groups for s in group)
        self.merged = tuple(merged)
        self._groups = groups
        # Copies: the writer keeps setting bits in the masks of dirty segments in place.
        self._masks = [[s.deleted.copy() for s in group] for group in groups]
        self._built: list[cp.Segment] = []
        self._state: MergeState = "running"
        self.error: BaseException | None = None
        self._cancel = threading.Event()
        self._finished = threading.Event()
        if not groups:
            self._state = "applied"  # nothing to merge
            self._finished.set()
            return
        # Not a daemon: interpreter exit waits for the segment write instead of cutting it off mid-file.
        self._thread = threading.Thread(target=self._run, args=(directory, index_class, encoder_digest),
                                        name=f"uhdsearch-merge-{merged[0]}")
        self._thread.start()

    @property
    def state(self) -> MergeState:
        """One of "running", "finished" (waits for a commit), "applied", "discarded" (a source segment went
        away meanwhile), "failed" (see `error`) or "cancelled" (by close)."""
        if self._state == "running" and self._finished.is_set():
            return "failed" if self.error is not None else "finished"
        return self._state

    def done(self) -> bool:
        """Whether the worker has stopped (merged, failed or cancelled)."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker stops or `timeout` seconds pass; returns `done()`."""
        return self._finished.wait(timeout)

    def __repr__(self) -> str:
        return f"BackgroundMerge({', '.join(self.sources)} -> {', '.join(self.merged)}, state={self.state!r})"

    # ------------------------------------------------------------------ writer side
    def swap_into(self, segments: list[cp.Segment]) -> list[cp.Segment] | None:
        """`segments` with each group replaced by its merged segment, or None when the merge is discarded.

        Call once `done()`. Deletions only ever set bits, so a row live in the snapshot but deleted now was
        deleted while the merge ran: it is marked deleted in the merged segment too. The merge is discarded
        when it failed (its owner warns: `state` is then "failed") or when a source is no longer in `segments`
        (fully deleted and dropped, or merged again).
        """
        if self.state == "failed":
            self._state = "failed"
            return None
        positions = {id(s): i for i, s in enumerate(segments)}
        if any(id(s) not in positions for group in self._groups for s in group):
            self._state = "discarded"
            logger.info("discarded the merge into %s: a source segment is gone", ", ".join(self.merged))
            return None
        out: list[cp.Segment | None] = list(segments)
        for group, masks, merged in zip(self._groups, self._masks, self._built):
            merged.deleted = np.concatenate([s.deleted[~mask] for s, mask in zip(group, masks)])
            merged.n_deleted = int(merged.deleted.sum())
            merged.dirty = merged.n_deleted > 0
            # Sources are contiguous among live segments, so the merged one takes the first's place.
            out[positions[id(group[0])]] = merged
            for s in group[1:]:
                out[positions[id(s)]] = None
        self._state = "applied"
        return [s for s in out if s is not None]

    def cancel(self, directory: Path) -> None:
        """Stop the worker (after the step in progress) and remove whatever it wrote."""
        if self._state != "running":  # swapped in, discarded, or nothing to merge
            return
        self._cancel.set()
        self._finished.wait()
        self._state = "failed" if self.error is not None else "cancelled"
        remove(segment_paths(directory, self.merged))  # never named by a commit: nothing refers to them

    # ------------------------------------------------------------------ worker side
    def _run(self, directory: Path, index_class: type[InvertedIndex], encoder_digest: str | None) -> None:
        try:
            for group, masks, name in zip(self._groups, self._masks, self.merged):
                self._check_cancelled()
                encoding, ids = live_documents(group, masks)
                self._check_cancelled()
                index = index_class.from_encoding(encoding, ids, None, encoder_digest=encoder_digest)
                self._check_cancelled()
                index.save(directory / name)
                cp.fsync_tree(directory / name)
                meta_sha256 = cp.sha256(directory / name / fmt.META_FILE)
                self._built.append(cp.Segment(name, index, np.zeros(len(ids), np.bool_), None, meta_sha256))
            self._check_cancelled()
        except _Cancelled:
            pass
        except Exception as exc:  # reported by `state`, `error` and a warning at commit; the writer goes on
            self.error = exc
        finally:
            self._finished.set()

    def _check_cancelled(self) -> None:
        if self._cancel.is_set():
            raise _Cancelled

