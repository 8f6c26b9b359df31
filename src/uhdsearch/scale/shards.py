"""Sharded exact search on Ray: document-range shards held by actors, per-shard top-k merged by the tie rule.

`ShardedIndex` is a `SearchableIndex`, so `Searcher(encoder, sharded)` encodes each query once on the caller and
sends the encoded batch to every shard; a service (e.g. `uhdsearch serve`) builds its Searcher the same way.
Shards hold consecutive doc-number ranges, so the merge is the segmented index's `merge_top`: score descending,
then global doc number ascending, the same order as one unsharded search.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import IndexFormatError, UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.base import Scoring, check_search_args
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.live.segment_search import merge_top
from uhdsearch.scale.cluster import connect, positive
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)


def split_index(
    index: InvertedIndex | str | os.PathLike, n_shards: int, out_dir: str | os.PathLike, overwrite: bool = False
) -> list[Path]:
    """Write `n_shards` static indexes holding consecutive, near-equal document ranges of `index`.

    Returns:
        the shard directories, out_dir/shard_<i>, in doc-number order.
    Raises:
        UsageError: more shards than documents.
    """
    positive(n_shards, "n_shards")
    if not isinstance(index, InvertedIndex):
        index = InvertedIndex.load(index, mmap=True)
    if n_shards > index.n_documents:
        raise UsageError(f"n_shards={n_shards} is more than the index's {index.n_documents} documents")
    bounds = np.linspace(0, index.n_documents, n_shards + 1).round().astype(np.int64)
    columns = [_csc(p, index.n_documents, index.dim) for p in index.postings]
    klass = type(index)
    paths = []
    for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        encoding = SparseEncoding([c[start:stop].tocsr() for c in columns])
        path = Path(out_dir) / f"shard_{i}"
        storage = {"bitmap_bias": index.meta["bitmap_bias"]} if index.meta.get("bitmap_bias") else {}
        klass.from_encoding(encoding, index.doc_ids[start:stop], path, index.encoder_digest, overwrite=overwrite,
                            **storage)
        paths.append(path)
    return paths


def _csc(postings, n_documents: int, dim: int) -> sp.csc_matrix:
    data = postings.weights if postings.weights is not None else np.ones(postings.docs.shape[0], np.float32)
    return sp.csc_matrix((np.asarray(data), np.asarray(postings.docs), np.asarray(postings.indptr)),
                         shape=(n_documents, dim))


class _ShardActor:
    """One Ray actor holding one shard (loaded from its directory, memory-mapped when large)."""

    def __init__(self, path: str, n_threads: int) -> None:
        import numba

        numba.set_num_threads(n_threads)
        self.index = InvertedIndex.load(path)
        self.n_threads = n_threads

    def facts(self) -> dict:
        return {"n_documents": self.index.n_documents, "doc_ids": self.index.doc_ids, "dim": self.index.dim,
                "n_buckets": self.index.n_buckets, "variant": self.index.variant,
                "encoder_digest": self.index.encoder_digest}

    def search(self, queries, k, bucket_weights, scoring, deleted):
        return self.index.search_encoded(queries, k, bucket_weights, scoring, deleted, self.n_threads)

    def document_frequencies(self, bucket: int) -> np.ndarray:
        return self.index.document_frequencies(bucket)

    def warm_up(self) -> bool:
        self.index.warm_up()
        return True


class ShardedIndex:
    """Shards of one index on Ray actors, searched in parallel; results equal the unsharded index's.

    Args:
        shard_dirs: shard directories in doc-number order (`split_index`), readable on the nodes that host them.
        address: the Ray cluster (`scale.cluster.connect`); None: this process's cluster, or a local one.
        threads_per_shard: numba threads each actor searches with.
        start_timeout_s: how long to wait for the shards to load (ray.exceptions.GetTimeoutError beyond).
    Raises:
        IndexFormatError: the shards disagree on dim, buckets, variant or encoder.
    """

    def __init__(self, shard_dirs: Sequence[str | os.PathLike], address: str | None = None,
                 threads_per_shard: int = 1, start_timeout_s: float = 600.0) -> None:
        if not shard_dirs:
            raise UsageError("no shard directories given")
        positive(threads_per_shard, "threads_per_shard")
        ray = connect(address)
        self._ray = ray
        # No CPU reservation: more shards than cores must still start (4 shards on this 2-core machine); SPREAD
        # puts the shards on different nodes of a real cluster.
        remote = ray.remote(num_cpus=0, scheduling_strategy="SPREAD", max_restarts=3, max_task_retries=3)(_ShardActor)
        self._actors = [remote.remote(str(Path(p).resolve()), threads_per_shard) for p in shard_dirs]
        facts = ray.get([a.facts.remote() for a in self._actors], timeout=start_timeout_s)
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
        return len(self._actors)

    @property
    def n_documents(self) -> int:
        return len(self.doc_ids)

    def __repr__(self) -> str:
        return f"ShardedIndex(n_shards={self.n_shards}, n_documents={self.n_documents}, variant={self.variant!r})"

    def search_encoded(
        self, queries: SparseEncoding, k: int, bucket_weights: Sequence[float], scoring: Scoring,
        deleted: np.ndarray | None = None, n_threads: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over all shards (same contract as InvertedIndex.search_encoded).

        `n_threads` is accepted for the protocol; each shard searches with its actor's `threads_per_shard`.
        """
        check_search_args(self, queries, k, bucket_weights, scoring, deleted, n_threads)
        shipped = self._ray.put(queries)  # one copy in the object store, read by every shard
        weights = [float(w) for w in bucket_weights]
        pending = [a.search.remote(shipped, int(k), weights, scoring,
                                   None if deleted is None else deleted[self.offsets[i]:self.offsets[i + 1]])
                   for i, a in enumerate(self._actors)]
        numbers_parts, scores_parts = [], []
        for offset, (numbers, scores) in zip(self.offsets, self._ray.get(pending)):
            numbers_parts.append(np.where(numbers >= 0, numbers + offset, -1))
            scores_parts.append(scores)
        return merge_top(numbers_parts, scores_parts, queries.n, min(int(k), self.n_documents))

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        """(dim,) int64 documents in which each dimension is active, summed over shards."""
        parts = self._ray.get([a.document_frequencies.remote(bucket) for a in self._actors])
        return np.sum([np.asarray(p, np.int64) for p in parts], axis=0)

    def warm_up(self, background: bool = False) -> threading.Thread | None:
        """Fault every shard's pages in; `background` returns a thread that waits for them."""
        pending = [a.warm_up.remote() for a in self._actors]
        if not background:
            self._ray.get(pending)
            return None
        thread = threading.Thread(target=self._ray.get, args=(pending,), daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """End the shard actors (their CPUs go back to the cluster)."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
