"""Sharded exact search on Ray: document-range shards held by actors, per-shard top-k merged by the tie rule.

`ShardedIndex` is a `SearchableIndex`, so `Searcher(encoder, sharded)` encodes each query once on the caller and
sends the encoded batch to every shard; a service (e.g. `uhdsearch serve`) builds its Searcher the same way.
Shards hold consecutive doc-number ranges, so the merge is the segmented index's `merge_top`: score descending,
then global doc number ascending, the same order as one unsharded search. A segmented index is split by its live
documents in global order (deleted ones left out), which keeps that order. Each shard may have replicas
(`scale/replicas.py`): requests spread over them, and a dead replica's requests go to another.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from uhdsearch.errors import IndexFormatError, UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.base import IndexCapabilities, Scoring, check_search_args
from uhdsearch.index.impacts import refuse_planes
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex
from uhdsearch.index.live.segment_search import merge_top
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.scale.cluster import connect, positive
from uhdsearch.scale.replicas import ReplicaGroups
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)


def open_index(path: str | os.PathLike) -> InvertedIndex | SegmentedIndex:
    """A static index, or a segmented one opened read-only; memory-mapped (impact planes are refused)."""
    from uhdsearch.index import index_kind, open_index as open_any

    index = open_any(path, mmap=True)
    if index_kind(path) == "planes":
        refuse_planes(index.index, "sharding")  # its binary dims are value planes
    return index


def live_doc_ids(index: InvertedIndex | SegmentedIndex) -> list[str]:
    """The ids of the documents a search can return, in global doc-number order (a segmented index's deleted
    documents left out)."""
    return [d for d in index.doc_ids if d is not None]


def _live_vectors(index: InvertedIndex | SegmentedIndex) -> SparseEncoding:
    if isinstance(index, InvertedIndex):
        return index.document_vectors()
    # (segment, deleted mask, count) in global order: the view the segmented index's own search reads
    parts = [segment.document_vectors()[np.flatnonzero(~deleted)] for segment, deleted, _ in index._parts()]
    return SparseEncoding.concat(parts)


def split_index(
    index: InvertedIndex | SegmentedIndex | str | os.PathLike, n_shards: int, out_dir: str | os.PathLike,
    overwrite: bool = False,
) -> list[Path]:
    """Write `n_shards` static indexes holding consecutive, near-equal ranges of `index`'s live documents.

    Returns:
        the shard directories, out_dir/shard_<i>, in doc-number order.
    Raises:
        UsageError: more shards than (live) documents.
    """
    positive(n_shards, "n_shards")
    if not isinstance(index, (InvertedIndex, SegmentedIndex)):
        index = open_index(index)
    doc_ids = live_doc_ids(index)
    if n_shards > len(doc_ids):
        raise UsageError(f"n_shards={n_shards} is more than the index's {len(doc_ids)} documents")
    vectors = _live_vectors(index)
    if vectors.n != len(doc_ids):
        raise IndexFormatError(f"{index!r} has {len(doc_ids)} live ids but {vectors.n} live vectors")
    bounds = np.linspace(0, len(doc_ids), n_shards + 1).round().astype(np.int64)
    if isinstance(index, InvertedIndex):
        klass = type(index)
        storage = {"bitmap_bias": index.meta["bitmap_bias"]} if index.meta.get("bitmap_bias") else {}
    else:
        klass, storage = (WeightedIndex if index.variant == "weighted" else BinaryIndex), {}
    paths = []
    for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = Path(out_dir) / f"shard_{i}"
        klass.from_encoding(vectors[start:stop], doc_ids[start:stop], path, index.encoder_digest,
                            overwrite=overwrite, **storage)
        paths.append(path)
    return paths


class _ShardActor:
    """One Ray actor holding one shard (loaded from its directory, memory-mapped when large)."""

    def __init__(self, path: str, n_threads: int) -> None:
        import numba

        numba.set_num_threads(n_threads)
        self.index = InvertedIndex.load(path)
        self.n_threads = n_threads
        self.n_searches = 0

    def facts(self, with_ids: bool) -> dict:
        return {"n_documents": self.index.n_documents, "doc_ids": self.index.doc_ids if with_ids else None,
                "dim": self.index.dim, "n_buckets": self.index.n_buckets, "variant": self.index.variant,
                "encoder_digest": self.index.encoder_digest}

    def search(self, queries, k, bucket_weights, scoring, deleted, length_norm=0.0):
        self.n_searches += 1
        return self.index.search_encoded(queries, k, bucket_weights, scoring, deleted, self.n_threads, length_norm)

    def stats(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(), "searches": self.n_searches}

    def document_frequencies(self, bucket: int) -> np.ndarray:
        return self.index.document_frequencies(bucket)

    def warm_up(self) -> bool:
        self.index.warm_up()
        return True


class ShardedIndex(IndexCapabilities):
    """Shards of one index on Ray actors, searched in parallel; results equal the unsharded index's.

    Args:
        shard_dirs: shard directories in doc-number order (`split_index`), readable on the nodes that host them.
        address: the Ray cluster (`scale.cluster.connect`); None: this process's cluster, or a local one.
        threads_per_shard: numba threads each actor searches with.
        start_timeout_s: how long to wait for the shards to load (ray.exceptions.GetTimeoutError beyond).
        replicas: actors per shard, each with its own copy loaded; successive requests go to successive
            replicas, and a request whose replica died is sent to another (`scale/replicas.py`).
    Raises:
        IndexFormatError: the shards disagree on dim, buckets, variant or encoder.
    """

    def __init__(self, shard_dirs: Sequence[str | os.PathLike], address: str | None = None,
                 threads_per_shard: int = 1, start_timeout_s: float = 600.0, replicas: int = 1) -> None:
        if not shard_dirs:
            raise UsageError("no shard directories given")
        positive(threads_per_shard, "threads_per_shard")
        positive(replicas, "replicas")
        ray = connect(address)
        self._ray = ray
        # No CPU reservation: more shards than cores must still start (4 shards on this 2-core machine); SPREAD
        # puts the shards on different nodes of a real cluster. With replicas, a dead actor's call fails at once
        # and goes to another replica instead of waiting for Ray to restart it.
        retries = 3 if replicas == 1 else 0
        remote = ray.remote(num_cpus=0, scheduling_strategy="SPREAD", max_restarts=3,
                            max_task_retries=retries)(_ShardActor)
        paths = [str(Path(p).resolve()) for p in shard_dirs]
        self._groups = ReplicaGroups(ray, len(paths), replicas, lambda i: remote.remote(paths[i], threads_per_shard))
        self.replicas = replicas
        facts = ray.get([self._groups.live(i)[0].facts.remote(True) for i in range(len(paths))],
                        timeout=start_timeout_s)
        # the other replicas load too (their ids are not shipped): same shard, same size
        others = [(i, a.facts.remote(False)) for i in range(len(paths)) for a in self._groups.live(i)[1:]]
        for (i, _), f in zip(others, ray.get([ref for _, ref in others], timeout=start_timeout_s)):
            if f["n_documents"] != facts[i]["n_documents"]:
                raise IndexFormatError(f"replicas of {paths[i]} loaded {f['n_documents']} and "
                                       f"{facts[i]['n_documents']} documents (changed while starting?)")
        layout = {(f["dim"], f["n_buckets"], f["variant"], f["encoder_digest"]) for f in facts}
        if len(layout) != 1:
            raise IndexFormatError(f"the shards {list(map(str, shard_dirs))} disagree on (dim, buckets, variant, "
                                   f"encoder): {sorted(layout, key=str)}")
        first = facts[0]
        self.dim, self.n_buckets = first["dim"], first["n_buckets"]
        self.variant: fmt.Variant = first["variant"]
        self.encoder_digest: str | None = first["encoder_digest"]
        self.path = Path(shard_dirs[0]).resolve().parent
        self.sizes = [f["n_documents"] for f in facts]
        self.doc_ids = [d for f in facts for d in f["doc_ids"]]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    @property
    def n_shards(self) -> int:
        return self._groups.n_shards

    @property
    def n_documents(self) -> int:
        return len(self.doc_ids)

    def __repr__(self) -> str:
        return (f"ShardedIndex(n_shards={self.n_shards}, replicas={self.replicas}, n_documents={self.n_documents}, "
                f"variant={self.variant!r})")

    def search_encoded(
        self, queries: SparseEncoding, k: int, bucket_weights: Sequence[float], scoring: Scoring,
        deleted: np.ndarray | None = None, n_threads: int | None = None, length_norm: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over all shards (same contract as InvertedIndex.search_encoded).

        `n_threads` is accepted for the protocol; each shard searches with its actor's `threads_per_shard`.
        A length-normalized score depends on the document alone, so the shards' scores merge as they are.
        """
        check_search_args(self, queries, k, bucket_weights, scoring, deleted, n_threads, length_norm)
        shipped = self._ray.put(queries)  # one copy in the object store, read by every shard
        weights = [float(w) for w in bucket_weights]
        args = [(shipped, int(k), weights, scoring,
                 None if deleted is None else deleted[self.offsets[i]:self.offsets[i + 1]], float(length_norm))
                for i in range(self.n_shards)]
        numbers_parts, scores_parts = [], []
        for offset, (numbers, scores) in zip(self.offsets, self._groups.call("search", args)):
            numbers_parts.append(np.where(numbers >= 0, numbers + offset, -1))
            scores_parts.append(scores)
        return merge_top(numbers_parts, scores_parts, queries.n, min(int(k), self.n_documents))

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        """(dim,) int64 documents in which each dimension is active, summed over shards."""
        parts = self._groups.call("document_frequencies", [(bucket,)] * self.n_shards)
        return np.sum([np.asarray(p, np.int64) for p in parts], axis=0)

    def replica_stats(self) -> list[list[dict]]:
        """Per shard, per live replica: {"pid", "node_id", "searches"} (how the requests were spread)."""
        return [self._ray.get([a.stats.remote() for a in self._groups.live(i)]) for i in range(self.n_shards)]

    def warm_up(self, background: bool = False) -> threading.Thread | None:
        """Fault every replica's pages in; `background` returns a thread that waits for them."""
        pending = [a.warm_up.remote() for a in self._groups.everyone()]
        if not background:
            self._ray.get(pending)
            return None
        thread = threading.Thread(target=self._wait_warm, args=(pending,), daemon=True)
        thread.start()
        return thread

    def _wait_warm(self, pending: list) -> None:
        try:
            self._ray.get(pending)
        except self._ray.exceptions.RayActorError as exc:
            # close() during warm-up kills the actors mid-call: expected, not worth a thread traceback
            (logger.debug if self._groups.closed else logger.warning)("warm-up of a shard replica ended: %s",
                                                                      type(exc).__name__)

    def close(self) -> None:
        """End the shard actors (their CPUs go back to the cluster)."""
        self._groups.kill_all()
