"""SegmentedIndex: an updatable index of immutable segments, per-segment deletions and commit points (Lucene-style).

Directory layout: see `uhdsearch.index.live.commit`. Global doc numbers are the segments' internal numbers
concatenated in commit order, uncommitted additions last.
"""
from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch.errors import DataFormatError, IndexLockedError, UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.base import (IndexCapabilities, Scoring, check_documents, check_overlap_args,
                                  check_search_args)
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex
from uhdsearch.index.live import commit as cp
from uhdsearch.index.live.additions import check_additions
from uhdsearch.index.live.deletions import LiveDocuments, visible_doc_ids
from uhdsearch.index.live.leftovers import leftovers, referenced_by_any_commit, remove
from uhdsearch.index.live.lock import WriteLock
from uhdsearch.index.live.merges import BackgroundMerge, merge_segments, positive_int, start_background_merge
from uhdsearch.index.live.segment_search import (KeptScales, Part, live_document_frequencies, overlap_counts_parts,
                                                 search_parts)
from uhdsearch.io import now_or_in_background
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)


class SegmentedIndex(IndexCapabilities):
    """An index that takes additions and deletions by doc id without a rebuild, safe against kill -9.

    Changes become visible to new readers only at `commit()`; this instance sees its own changes at once.
    A crash at any moment leaves the last commit loadable; leftovers of the interrupted write are ignored
    and removed by the next writer. The previous commit is kept on disk as a fallback until the next one.

    Example (tiny vectors stand in for `model.encode_document(texts)`):
        >>> import tempfile
        >>> import scipy.sparse as sp
        >>> from uhdsearch.index.base import hits_per_query
        >>> def vectors(rows):
        ...     return SparseEncoding([sp.csr_matrix(np.array(rows, np.float32))])
        >>> tmp = tempfile.TemporaryDirectory()
        >>> index = SegmentedIndex.create(f"{tmp.name}/live", "binary", dim=4, n_buckets=1)
        >>> index.add(vectors([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]), ["d1", "d2", "d3"])
        >>> index.commit()
        2
        >>> index.delete(["d2"])
        1
        >>> index.commit(), index.merge(), index.n_segments
        (3, 4, 1)
        >>> index.add(vectors([[1, 0, 0, 1]]), ["d4"])
        >>> index.commit(), index.n_segments
        (5, 2)
        >>> merge = index.merge_in_background()  # the writer goes on meanwhile
        >>> index.delete(["d3"])
        1
        >>> merge.wait(), index.commit(), index.n_segments
        (True, 6, 1)
        >>> numbers, scores = index.search_encoded(vectors([[1, 1, 1, 0]]), 3, [1.0], "binary")
        >>> hits_per_query(numbers, scores, index.doc_ids)
        [[('d1', 2.0), ('d4', 1.0)]]
        >>> index.close(); tmp.cleanup()
    """

    answers_overlap_counts = searches_document_ranges = True
    takes_writes = True

    def __init__(
        self, directory: Path, body: dict[str, Any], segments: list[cp.Segment], lock: WriteLock | None,
        max_segments: int | None, background_merges: bool = False,
    ) -> None:
        self.path = directory
        self._body = body
        self._segments = segments
        self._lock = lock
        self._index_class: type[InvertedIndex] = WeightedIndex if body["variant"] == "weighted" else BinaryIndex
        self.max_segments = positive_int(max_segments, "max_segments", allow_none=True)
        self.background_merges = bool(background_merges)
        self._background: BackgroundMerge | None = None
        self._next_segment = max(body["next_segment"], cp.max_segment_number(directory) + 1)
        self._live = LiveDocuments(directory)  # where each live doc_id is; holds the uncommitted additions
        self._pending = False
        self._doc_ids: list[str | None] | None = None
        self._load_options: tuple[bool | None, bool | None] = (None, None)  # mmap, verify (for reopen)
        self._kept_scales = KeptScales()

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(
        cls, path: str | os.PathLike, variant: fmt.Variant, dim: int, n_buckets: int,
        encoder_digest: str | None = None, max_segments: int | None = None, background_merges: bool = False,
    ) -> SegmentedIndex:
        """Make an empty index (generation 1) and return it open for writing.

        Args:
            variant: "binary" or "weighted" (posting weights stored).
            max_segments: when set, `commit` merges as soon as there are more segments than this.
            background_merges: that merge runs in the background (`merge_in_background`) instead of blocking.
        Raises:
            FileExistsError: `path` exists and is not empty.
            ValueError: bad variant, dim or n_buckets.
        """
        if variant not in fmt.VARIANTS:
            raise UsageError(f"variant={variant!r}; choose one of {fmt.VARIANTS}")
        for name, value in (("dim", dim), ("n_buckets", n_buckets)):
            positive_int(value, name)
        directory = Path(path)
        body = {"generation": 1, "variant": variant, "dim": int(dim), "n_buckets": int(n_buckets),
                "encoder_digest": encoder_digest, "next_segment": 0, "n_documents": 0, "segments": []}
        lock = cp.create_directory(directory, body)
        return cls(directory, body, [], lock, max_segments, background_merges)

    @classmethod
    def open(
        cls, path: str | os.PathLike, writable: bool = False, mmap: bool | None = None, verify: bool | None = None,
        max_segments: int | None = None, background_merges: bool = False,
    ) -> SegmentedIndex:
        """Open the newest commit that validates (falling back to an older one with a warning).

        Args:
            writable: take the single-writer lock so that add/delete/commit/merge are allowed.
            mmap: passed to `InvertedIndex.load` for every segment, as is `verify`.
            max_segments: when set, `commit` merges as soon as there are more segments than this.
            background_merges: that merge runs in the background (`merge_in_background`) instead of blocking.
        Raises:
            FileNotFoundError: no such directory.
            IndexFormatError: no commit, or none whose files are all present and pass their checksums.
            IndexLockedError: writable=True while another writer holds the lock.
        """
        directory = Path(path)
        if not directory.is_dir():
            raise FileNotFoundError(f"no index directory at {directory}")
        lock = WriteLock(directory) if writable else None
        try:
            body, segments = cp.open_newest(directory, mmap, verify)
            if lock is not None:
                remove(leftovers(directory, referenced_by_any_commit(directory)))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        index = cls(directory, body, segments, lock, max_segments, background_merges)
        index._load_options = (mmap, verify)
        return index

    def reopen(self) -> SegmentedIndex:
        """A reader at the newest commit that shares unchanged segments with this one (Lucene's openIfChanged).

        Returns `self` when nothing was committed since, and for a writer, which always sees its own state.
        """
        if self._lock is not None or cp.list_generations(self.path)[:1] == [self.generation]:
            return self
        mmap, verify = self._load_options
        body, segments = cp.open_newest(self.path, mmap, verify, loaded=self._segments)
        index = type(self)(self.path, body, segments, None, self.max_segments)
        index._load_options = self._load_options
        return index

    def close(self) -> None:
        """Release the write lock; uncommitted changes are discarded with a warning.

        A background merge not yet swapped in is cancelled (after the step it is in) and its files removed.
        """
        if self._lock is not None:
            if self._background is not None:
                self._background.cancel(self.path)
                self._background = None
            if self._pending:
                warnings.warn(f"closing {self.path} discards uncommitted changes; call commit() first",
                              stacklevel=2)
            self._lock.release()
            self._lock = None

    def __enter__(self) -> SegmentedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ facts
    @property
    def variant(self) -> fmt.Variant:
        return self._body["variant"]

    @property
    def dim(self) -> int:
        return self._body["dim"]

    @property
    def n_buckets(self) -> int:
        return self._body["n_buckets"]

    @property
    def encoder_digest(self) -> str | None:
        return self._body["encoder_digest"]

    @property
    def generation(self) -> int:
        """Generation of the commit this instance was opened at or last wrote."""
        return self._body["generation"]

    @property
    def n_segments(self) -> int:
        return len(self._segments)

    @property
    def background_merge(self) -> BackgroundMerge | None:
        """The background merge not yet swapped in by a commit (running or finished), or None."""
        return self._background

    @property
    def n_documents(self) -> int:
        """Live documents, uncommitted changes included."""
        return sum(s.n_live for s in self._segments) + len(self._live.added)

    @property
    def doc_ids(self) -> list[str | None]:
        """External id per global doc number; None where that document is deleted (never returned by search)."""
        if self._doc_ids is None:
            self._doc_ids = visible_doc_ids(self._segments, self._live.added)
        return self._doc_ids

    def __repr__(self) -> str:
        return (f"SegmentedIndex({str(self.path)!r}, generation={self.generation}, n_documents={self.n_documents}, "
                f"n_segments={self.n_segments}, variant={self.variant!r})")

    # ------------------------------------------------------------------ changes
    def add(self, encoding: SparseEncoding, doc_ids: Sequence[str], replace: bool = False) -> None:
        """Add encoded documents; row i of `encoding` is `doc_ids[i]`. Visible to readers after `commit()`.

        Args:
            replace: a doc_id that is already live is deleted first (like Lucene's updateDocument).
        Raises:
            DimensionMismatchError: the encoding's dim or bucket count differs from the index's.
            DataFormatError: duplicate ids in `doc_ids`, or ids already live while replace=False.
        """
        self._check_writable()
        doc_ids = check_additions(encoding, doc_ids, self.dim, self.n_buckets)
        present = self._live.present(self._segments, doc_ids)
        if present and not replace:
            raise DataFormatError(f"{len(present)} doc_ids are already in the index, e.g. {present[:5]}; pass "
                                  "replace=True to replace them, or delete them first")
        if not doc_ids:
            return
        self._live.delete(self._segments, present)
        self._live.added.add(encoding, doc_ids)
        self._changed()

    def delete(self, doc_ids: Sequence[str], missing_ok: bool = False) -> int:
        """Delete documents by doc id; returns how many were deleted. Visible to readers after `commit()`.

        Raises:
            ValueError: some ids are not live in the index (all are listed) and missing_ok is False.
        """
        self._check_writable()
        if isinstance(doc_ids, str):
            raise TypeError("doc_ids must be a list of ids, not one string")
        ids = list(dict.fromkeys(str(d) for d in doc_ids))
        present = self._live.present(self._segments, ids)
        if len(present) != len(ids) and not missing_ok:
            known = set(present)
            missing = [d for d in ids if d not in known]
            raise UsageError(f"{len(missing)} doc_ids are not in the index: {missing}; pass missing_ok=True to "
                             "ignore unknown ids")
        self._live.delete(self._segments, present)
        if present:
            self._changed()
        return len(present)

    def commit(self, before_publish: Callable[[int], None] | None = None) -> int:
        """Make every change durable and visible to new readers; returns the new generation.

        Writes the added documents as a new segment and changed deletions as new files, fsyncs them, then
        writes commit_<generation>.json atomically. A finished background merge is swapped in first. With more
        than `max_segments` segments, merges them (or starts a background merge if `background_merges` is set and
        none is under way). `before_publish(generation)` runs just before the commit file is written: files it
        writes under that generation are published by the same rename (the service's added texts).
        """
        self._check_writable()
        self._flush()
        self._swap_in_finished_merge()
        if self.max_segments is not None and len(self._segments) > self.max_segments:
            if not self.background_merges:
                self._merge(self.max_segments)
            elif self._background is None:
                self._start_background_merge(self.max_segments)
        return self._write_commit(before_publish)

    def merge(self, max_segments: int = 1) -> int:
        """Rewrite live documents so that at most `max_segments` segments remain, then commit.

        With more segments than that, the contiguous run of segments with the fewest live documents is merged
        into one (global order kept); otherwise each segment with deletions is rewritten without them.
        Old segments are removed only after the new commit is durable. Returns the new generation.
        """
        self._check_writable()
        max_segments = positive_int(max_segments, "max_segments")
        self._flush()
        self._swap_in_finished_merge()  # one still running is discarded if this merge takes its segments
        self._merge(max_segments)
        return self._write_commit()

    def merge_in_background(self, max_segments: int = 1) -> BackgroundMerge:
        """Start merging segments in a worker thread while this writer goes on adding, deleting and committing.

        The segments are chosen now, by `merge`'s rule, among those already written (committed or flushed by a
        commit); additions since the last commit are not included. The first `commit()` after the merge finishes
        swaps it in, carrying over deletions made to its segments meanwhile; `merge.wait()` then `commit()` to
        be sure. If a source segment is gone by then (fully deleted, or merged by `merge`), the result is
        discarded and removed. One background merge at a time; `close()` cancels one not yet swapped in.

        Returns:
            the merge: `state`, `sources`, `merged`, `wait(timeout)`; state "applied" at once if there was
            nothing to merge.
        Raises:
            RuntimeError: a background merge is already under way.
        Example: see the class's.
        """
        self._check_writable()
        max_segments = positive_int(max_segments, "max_segments")
        if self._background is not None:
            raise RuntimeError(f"{self._background!r} is still under way; call its wait() and then commit() "
                               "before starting another")
        return self._start_background_merge(max_segments)

    # ------------------------------------------------------------------ search
    def search_encoded(
        self,
        queries: SparseEncoding,
        k: int,
        bucket_weights: Sequence[float],
        scoring: Scoring,
        deleted: np.ndarray | None = None,
        n_threads: int | None = None,
        length_norm: float = 0.0,
        documents: tuple[int, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over the live documents (of lo..hi-1 with `documents`) in global doc numbers: InvertedIndex's
        contract, its shapes, tie rule and padding."""
        check_search_args(self, queries, k, bucket_weights, scoring, deleted, n_threads, length_norm)
        check_documents(self, documents)
        return search_parts(self._parts(), queries, k, min(int(k), self.n_documents), bucket_weights, scoring,
                            deleted, n_threads, length_norm, documents)

    def length_scales(self, alpha: float) -> list[tuple[np.ndarray, ...]]:
        """InvertedIndex.length_scales over global doc numbers (deleted documents included)."""
        return self._kept_scales.get(self._parts(), alpha, self.n_buckets)

    def overlap_counts(self, query: SparseEncoding, numbers: np.ndarray, quantized: bool = False) -> np.ndarray:
        """Per bucket, the dims one query row shares with each given global doc number (InvertedIndex's)."""
        check_overlap_args(self, query, numbers)
        return overlap_counts_parts(self._parts(), query, numbers, quantized)

    def warm_up(self, background: bool = False) -> threading.Thread | None:
        """Fault every segment's memory-mapped pages in and count its document lengths (InvertedIndex.warm_up)."""
        indexes = [s.index for s in self._segments]

        def work() -> None:
            for index in indexes:
                index.warm_up()

        return now_or_in_background(work, background)

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        """(dim,) int64 number of live documents in which each dimension is active."""
        return live_document_frequencies(self._parts(), self.dim, bucket)

    # ------------------------------------------------------------------ internals
    def _check_writable(self) -> None:
        if self._lock is None:
            raise IndexLockedError(f"{self.path} is open read-only (or closed); open it with "
                                      "SegmentedIndex.open(path, writable=True) to change it")

    def _parts(self) -> list[Part]:
        """(index, deleted mask, deleted count) per segment in global order, the uncommitted additions last."""
        parts = [(s.index, s.deleted, s.n_deleted) for s in self._segments]
        if self._live.added:
            index = self._live.added.index(self._index_class, self.encoder_digest)
            parts.append((index, np.zeros(index.n_documents, np.bool_), 0))
        return parts

    def _changed(self) -> None:
        self._pending = True
        self._doc_ids = None

    def _new_segment(self, encoding: SparseEncoding, doc_ids: list[str]) -> cp.Segment:
        name = cp.segment_name(self._next_segment)
        self._next_segment += 1
        return cp.write_segment(self.path / name, self._index_class, encoding, doc_ids, self.encoder_digest)

    def _flush(self) -> None:
        """Write uncommitted additions as one new segment (not yet named by any commit)."""
        if self._live.added:
            encoding, ids = self._live.added.encoding()
            self._segments.append(self._new_segment(encoding, ids))
            self._live.flushed(len(self._segments) - 1, ids)
        self._live.added.clear()
        self._changed()

    def _merge(self, max_segments: int) -> None:
        self._segments = merge_segments(self._segments, max_segments, self._new_segment)
        self._live.forget()
        self._changed()

    def _start_background_merge(self, max_segments: int) -> BackgroundMerge:
        merge = start_background_merge(self.path, self._segments, max_segments, self._next_segment,
                                       self._index_class, self.encoder_digest)
        self._next_segment += len(merge.merged)  # reserved now: no flush or merge may write under these names
        if merge.merged:
            self._background = merge
        return merge

    def _swap_in_finished_merge(self) -> None:
        merge = self._background
        if merge is None or not merge.done():
            return
        self._background = None  # from here on its files are ordinary leftovers unless a commit names them
        swapped = merge.swap_into(self._segments)  # None when discarded
        if merge.state == "failed":
            # stacklevel: _swap_in_finished_merge <- commit or merge <- the caller
            warnings.warn(f"the background merge of {', '.join(merge.sources)} failed ({merge.error!r}); it was "
                          "discarded and the index is unchanged", stacklevel=3)
        if swapped is not None:
            self._segments = swapped
            self._live.forget()
            self._changed()

    def _write_commit(self, before_publish: Callable[[int], None] | None = None) -> int:
        body, kept = cp.write_next_commit(self.path, self._body, self._segments, self._next_segment, before_publish)
        # Durable from here on. Keep the previous commit as a fallback; everything else may go.
        previous, self._body = self._body, body
        if len(kept) != len(self._segments):
            self._live.forget()  # positions shifted: fully deleted segments were dropped
        self._segments = kept
        self._changed()
        self._pending = False
        keep = cp.referenced_files(body) | cp.referenced_files(previous)
        being_written = self._background.merged if self._background is not None else ()
        remove(leftovers(self.path, keep, being_written))
        return body["generation"]
