"""SearchService: the encoder, the committed index snapshot that searches read, and the one writer.

Searches take the current snapshot once and use only it, so a commit is seen whole or not at all: the writer
changes its own SegmentedIndex instance, and readers move to the new commit only when `commit()` swaps in a
reopened reader. Write requests run one at a time; a second one meanwhile gets a 409 rather than waiting.

With `max_segments`, a commit that leaves more segments than that starts a background merge (the index's
worker thread: searches and writes go on). When it finishes, a publisher thread swaps it in with a commit of
its own, as crash-safe as any other (the merged segment is written beside the others and named only by the new
commit file); while changes are pending it leaves the merge to the next commit instead, so that a merge never
publishes a change nobody committed.
"""
from __future__ import annotations

import logging
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from uhdsearch.errors import DataFormatError, IndexLockedError, UsageError
from uhdsearch.index.base import SearchableIndex
from uhdsearch.index import commit_exists
from uhdsearch.search.options import SearchOptions  # noqa: F401  (moved to search/options.py; kept importable)
from uhdsearch.search.searcher import Searcher
from uhdsearch.serving.documents import ADDED_FILE, DocumentStore, Texts
from uhdsearch.serving.explain import TypicalTokens, WinnersCache, dim_contributions, query_winners
from uhdsearch.serving.settings import ServeSettings
from uhdsearch.types import Document, Query, Run

logger = logging.getLogger(__name__)

MERGE_PUBLISH_WAIT_S = 60.0  # how long a write waits while a finished merge is being published (not 409)


class ServiceError(Exception):
    """A refusal with its HTTP status (404 unknown id, 405 static index, 409 busy writer, 423 locked index)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Snapshot:
    """One committed state of the index; never changed once searches use it.

    Its id map is built when the snapshot is made (at open, or by the commit on its worker thread), never by
    the first request that needs it: on a large index that would stall the event loop.
    """

    index: SearchableIndex
    generation: int | None
    texts: Texts = field(default_factory=Texts)  # the documents' titles and texts as of this commit
    number: dict[str, int] = field(init=False, repr=False, compare=False)  # live doc_id -> doc number

    def __post_init__(self) -> None:
        object.__setattr__(self, "number", {d: n for n, d in enumerate(self.index.doc_ids) if d is not None})


class _TimedEncoder:
    """The encoder, with the time of every query encoding reported (the Searcher sees the same interface)."""

    def __init__(self, encoder, report: Callable[[float], None]) -> None:
        self._encoder = encoder
        self._report = report

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._encoder.encode(*args, **kwargs)
        finally:
            self._report(time.perf_counter() - start)


@dataclass
class SearchService:
    """Everything the routes call; blocking methods, run in a worker thread by the app."""

    encoder: object
    snapshot: Snapshot
    documents: DocumentStore
    writer: object | None = None  # a writable SegmentedIndex
    write_refusal: tuple[int, str] | None = None  # why writes are impossible (static or locked index)
    bm25: object | None = None
    typical: TypicalTokens | None = None
    on_encode: Callable[[float], None] = lambda seconds: None
    query_encoder: object | None = None  # e.g. a LookupEncoder (inference-free queries); None: `encoder`
    # for /explain: the token winners of the documents asked about last
    document_winners: WinnersCache = field(default_factory=lambda: WinnersCache(ServeSettings.explain_cache))
    _write_lock: threading.Lock = field(default_factory=threading.Lock)
    _pending: list[Document] = field(default_factory=list)
    _pending_deletes: int = 0
    _searcher_lock: threading.Lock = field(default_factory=threading.Lock)
    _searcher: tuple | None = None  # (snapshot, query encoder, its Searcher): one per committed snapshot
    _watched: object | None = None  # the background merge a publisher thread waits for
    _publishers: int = 0  # merge publishers that want the write lock or hold it
    _publishers_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, encoder, index_path: Path, corpus: dict[str, Document] | None = None, writable: bool = True,
             bm25=None, typical_sample: int = 0, max_segments: int | None = None) -> SearchService:
        """Load a static index or open a segmented one (its writer too when `writable` and the lock is free).

        max_segments: the writer merges in the background whenever a commit (or the index as opened) leaves
            more segments than this; None: never.
        """
        from uhdsearch.index import index_kind, open_index
        from uhdsearch.index.live.segments import SegmentedIndex

        index_path = Path(index_path)
        writer, refusal, added = None, None, None
        if index_kind(index_path) == "segmented":  # the writer first: it clears what a killed writer left
            added = index_path / ADDED_FILE
            if writable:
                try:
                    writer = SegmentedIndex.open(index_path, writable=True, max_segments=max_segments,
                                                 background_merges=True)
                except IndexLockedError as exc:
                    refusal = (423, f"the index is locked by another writer: {exc}")
            else:
                refusal = (423, "the server was started read-only")
        else:
            refusal = (405, f"{index_path} is a static index; serve a segmented index to add or delete documents")
        reader = open_index(index_path)
        documents = DocumentStore(corpus, added, writer=writer is not None, generation=reader.generation)
        snapshot = Snapshot(reader, reader.generation, documents.texts)
        typical = TypicalTokens(encoder, [d.full_text for d in documents.sample(typical_sample)]) \
            if typical_sample > 0 else None
        service = cls(encoder, snapshot, documents, writer, refusal, bm25, typical)
        Searcher(encoder, snapshot.index, max_df=None)  # dim and bucket checks now, not on the first request
        if writer is not None and max_segments is not None and writer.n_segments > max_segments:
            writer.merge_in_background(max_segments)
            service._watch_merge()
        return service

    def close(self) -> None:
        """Release the writer (a background merge not yet published is cancelled and its files removed)."""
        with self._write_lock:  # not in the middle of a commit, the merge publisher's included
            if self.writer is not None:
                self.writer.close()
                self.writer = None

    # ------------------------------------------------------------------ reading
    def searcher(self, snapshot: Snapshot) -> Searcher:
        """The snapshot's Searcher, built once per snapshot (and query encoder); requests pass their options."""
        with self._searcher_lock:
            held = self._searcher
            if held is None or held[0] is not snapshot or held[1] is not self._query_encoder():
                held = self._bind(snapshot)
                if snapshot is self.snapshot:  # an older snapshot's last requests are served uncached
                    self._searcher = held
            return held[2]

    def _query_encoder(self):
        return self.encoder if self.query_encoder is None else self.query_encoder

    def _bind(self, snapshot: Snapshot) -> tuple:
        encoder = self._query_encoder()
        timed = _TimedEncoder(encoder, lambda seconds: self.on_encode(seconds))  # on_encode may be set later
        return snapshot, encoder, Searcher(timed, snapshot.index)

    def search(self, queries: list[Query], k: int, options: SearchOptions,
               candidates: dict[str, list[str]] | None = None) -> tuple[Run, Snapshot]:
        snapshot = self.snapshot
        searcher = self.searcher(snapshot)
        if candidates is None:
            return searcher.search(queries, k, options=options), snapshot
        from uhdsearch.types import ScoredDoc

        pool = Run({q: [ScoredDoc(d, 0.0) for d in ids] for q, ids in candidates.items()})
        return searcher.rerank(queries, pool, k, options=options), snapshot

    def bm25_search(self, queries: list[Query], k: int) -> Run:
        if self.bm25 is None:
            raise ServiceError(404, "no BM25 index: start the server with --bm25 (and --data)")
        return self.bm25.search(queries, k, show_progress=False)  # no bar per request in the server log

    def document(self, doc_id: str, snapshot: Snapshot | None = None) -> Document | None:
        """The live document's text (title and text empty when no text was given), or None when not live."""
        snapshot = snapshot or self.snapshot
        if doc_id not in snapshot.number:
            return None
        return snapshot.texts.get(doc_id) or Document(doc_id, "")

    def explain(self, text: str, doc_id: str, options: SearchOptions, max_dims: int = 50) -> dict:
        snapshot = self.snapshot
        number = snapshot.number.get(doc_id)
        if number is None:
            raise ServiceError(404, f"doc_id {doc_id!r} is not in the index")
        searcher = self.searcher(snapshot)
        resolved = searcher.resolve(options)
        cut = text[:self._max_query_chars()]
        query_tokens, raw = query_winners(self.encoder, cut)
        encoder = self.query_encoder  # batching.PreEncoded under the app: the one pass then scores the query too;
        one_pass = hasattr(encoder, "given") and encoder.wraps(self.encoder)  # a lookup or student encodes its own
        with encoder.given({cut: raw}) if one_pass else contextlib.nullcontext():
            query = searcher.encode([Query("q", cut)], options)
        # kernel_scoring: with idf, binary scoring counts the quantized query weights, as /search does
        shared = dim_contributions(snapshot.index, query, number, resolved.bucket_weights, resolved.kernel_scoring,
                                   resolved.length_norm)
        first_pass = _first_pass_dims(searcher, resolved.cascade, snapshot.index.n_documents)
        shared.sort(key=lambda row: (-row[3], row[0], row[1]))
        document = snapshot.texts.get(doc_id)
        document_tokens = self.document_winners.get(self.encoder, doc_id, document.full_text) if document else None
        layers = self.encoder.layers
        buckets = []
        for b in range(snapshot.index.n_buckets):
            mine = [row for row in shared if row[0] == b]
            dims = []
            for _, dim, value, contribution in mine[:max_dims]:
                typical = self.typical.get(b, dim) if self.typical is not None else None
                dims.append({**({"first_pass": bool(first_pass(b, dim))} if first_pass else {}),
                    "dim": dim, "contribution": contribution, "query_value": value,
                    "query_tokens": _pairs(query_tokens[b].tokens_of(dim), "value"),
                    "document_tokens": (_pairs(document_tokens[b].tokens_of(dim), "value")
                                        if document_tokens else None),
                    "typical_tokens": _pairs(typical, "count") if typical is not None else None,
                })
            buckets.append({"bucket": b, "layer": layers[b], "weight": resolved.bucket_weights[b],
                            "score": sum(row[3] for row in mine), "n_matched": len(mine), "dims": dims})
        cascade = resolved.cascade
        return {"query": text, "doc_id": doc_id, "scoring": resolved.scoring,
                "options": {"scoring": resolved.scoring, "query_k": resolved.query_k, "max_df": resolved.max_df,
                            "idf": resolved.idf, "length_norm": resolved.length_norm,
                            "cascade": None if cascade is None else
                            {"first_max_df": cascade.first_max_df, "depth": cascade.depth,
                             "first_pass_score": sum(row[3] for row in shared if first_pass(row[0], row[1]))}},
                "score": sum(row[3] for row in shared), "n_query_dims": int(sum(m.nnz for m in query.buckets)),
                "document_text": document is not None,
                "typical_tokens": "ready" if self.typical and self.typical.ready else
                ("pending" if self.typical and self.typical.n_documents else "off"),
                "buckets": buckets}

    @staticmethod
    def _max_query_chars() -> int:
        from uhdsearch.search.searcher import MAX_QUERY_CHARS

        return MAX_QUERY_CHARS

    # ------------------------------------------------------------------ writing
    def _writing(self) -> threading.Lock:
        if self.write_refusal is not None:
            raise ServiceError(*self.write_refusal)
        if not self._write_lock.acquire(blocking=False):
            # A merge being published is no other client's write: wait for it rather than answer 409.
            if not (self._publishers and self._write_lock.acquire(timeout=MERGE_PUBLISH_WAIT_S)):
                raise ServiceError(409, "another write request is under way; retry when it has finished")
        if self.writer is None:
            self._write_lock.release()
            raise ServiceError(503, "the server is shutting down")
        return self._write_lock

    @property
    def pending_changes(self) -> int:
        """Documents added and deleted since the last commit: lost at shutdown unless committed."""
        return len(self._pending) + self._pending_deletes

    def add(self, documents: list[Document], replace: bool = False, commit: bool = False) -> int:
        """Encode and add documents (visible to searches after the next commit, or now with `commit`); returns
        the pending changes."""
        lock = self._writing()
        try:
            ids = [d.doc_id for d in documents]
            if len(set(ids)) != len(ids):
                raise ServiceError(422, "the batch names a doc_id twice")
            encoding = self.encoder.encode_document([d.full_text for d in documents], show_progress=False)
            try:
                self.writer.add(encoding, ids, replace=replace)
            except DataFormatError as exc:
                raise ServiceError(409, str(exc)) from None
            self._pending.extend(documents)
            if commit:
                self._commit()
            return self.pending_changes
        finally:
            lock.release()

    def delete(self, doc_id: str, commit: bool = False) -> int:
        """Delete a document (gone from searches after the next commit, or now with `commit`); returns the
        pending changes."""
        lock = self._writing()
        try:
            try:
                self._pending_deletes += self.writer.delete([doc_id])
            except UsageError:
                raise ServiceError(404, f"doc_id {doc_id!r} is not in the index") from None
            if commit:
                self._commit()
            return self.pending_changes
        finally:
            lock.release()

    def commit(self) -> dict:
        """Make the pending changes durable and visible: one index commit publishes vectors and texts, then the
        snapshot is swapped."""
        lock = self._writing()
        try:
            return self._commit()
        finally:
            lock.release()

    def _commit(self) -> dict:
        """The index commit publishes the added texts too (documents.py): a crash at any point leaves texts and
        vectors of the same commit."""
        added, staged = self._pending, []

        def stage_texts(generation: int) -> None:
            self.documents.stage(added, generation)
            staged.append(generation)

        try:
            generation = self.writer.commit(before_publish=stage_texts)
        except BaseException:
            if staged and not commit_exists(self.writer.path, staged[0]):
                self.documents.unstage()
            raise
        texts = self.documents.publish(added)
        self._pending, self._pending_deletes = [], 0
        reader = self.snapshot.index.reopen()
        snapshot = Snapshot(reader, reader.generation, texts)
        held = self._bind(snapshot)
        held[2].facts.document_frequencies  # counted here, before the swap, not in the next search request
        with self._searcher_lock:
            self.snapshot, self._searcher = snapshot, held
        self._watch_merge()
        return {"generation": generation, "n_documents": reader.n_documents}

    # ------------------------------------------------------------------ merging
    @property
    def merging(self) -> bool:
        """Whether a background merge is under way or waits to be published."""
        return self.writer is not None and self.writer.background_merge is not None

    def _watch_merge(self) -> None:
        """Have the writer's background merge (if a commit just started one) published when it finishes."""
        merge = self.writer.background_merge if self.writer is not None else None
        if merge is None or merge is self._watched:
            return
        self._watched = merge
        logger.info("merging segments %s in the background", ", ".join(merge.sources))
        threading.Thread(target=self._publish_merge, args=(merge,), name="uhdsearch-merge-publisher",
                         daemon=True).start()

    def _publish_merge(self, merge) -> None:
        merge.wait()
        with self._publishers_lock:
            self._publishers += 1
        try:
            with self._write_lock:
                if self.writer is None or self.writer.background_merge is not merge:
                    return  # closed (the merge cancelled), or a commit already swapped it in
                if self.pending_changes:
                    logger.info("merge of %s finished; the next commit publishes it with the %d pending changes",
                                ", ".join(merge.sources), self.pending_changes)
                    return
                done = self._commit()
                logger.info("merged %s into %s (generation %d, %d segments)", ", ".join(merge.sources),
                            ", ".join(merge.merged), done["generation"], self.writer.n_segments)
        except Exception:  # the index is unchanged; the next commit tries again
            logger.exception("publishing the merge of %s failed", ", ".join(merge.sources))
        finally:
            with self._publishers_lock:
                self._publishers -= 1


def _first_pass_dims(searcher: Searcher, cascade, n_documents: int):
    """(bucket, dim) -> whether a cascade's first pass reads that query dim (cascade.split_by_frequency's rule);
    None without a cascade."""
    if cascade is None:
        return None
    frequencies = searcher.facts.document_frequencies
    limit = cascade.first_max_df * n_documents
    return lambda bucket, dim: frequencies[bucket][dim] <= limit


def _pairs(items, name: str) -> list[dict]:
    return [{"token": token, name: value} for token, value in items]
