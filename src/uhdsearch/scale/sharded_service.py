"""`uhdsearch serve --shards N [--replicas R]`: the HTTP service over an index split into shards on Ray actors.

The service's searcher encodes each query once and `ShardedIndex` fans the encoded batch out to every shard, so
/search and /explain answer exactly as over the unsharded index. A static index or a segmented one (its live
documents at the newest commit) is split; shards are written once into a shard directory and reused when they
match the index (same documents in the same order, same encoder and variant, and for a segmented index the same
commit generation, recorded in SOURCE_FILE).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from uhdsearch.errors import IndexFormatError, UsageError
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.io import read_json, write_json
from uhdsearch.scale.cluster import positive
from uhdsearch.scale.shards import ShardedIndex, live_doc_ids, open_index, split_index

logger = logging.getLogger(__name__)

SOURCE_FILE = "source.json"  # which commit of a segmented index the shards hold


def shard_dirs_for(index_dir: str | os.PathLike, n_shards: int, shard_dir: str | os.PathLike) -> list[Path]:
    """The shard directories of `index_dir` under `shard_dir`: reused when they hold exactly this index's
    documents in order (same encoder and variant), else written (`split_index`).

    Raises:
        UsageError: `shard_dir` holds something other than shards (never overwritten), or n_shards < 1.
        IndexFormatError: `index_dir` is not an index.
    """
    positive(n_shards, "--shards")
    index_dir, shard_dir = Path(index_dir), Path(shard_dir)
    index = open_index(index_dir)
    source = {"generation": index.generation if isinstance(index, SegmentedIndex) else None}
    wanted = [shard_dir / f"shard_{i}" for i in range(n_shards)]
    if _matches(index, wanted) and _source(shard_dir) == source:
        logger.info("reusing %d shards in %s", n_shards, shard_dir)
        return wanted
    if shard_dir.exists():
        foreign = [p.name for p in shard_dir.iterdir() if not p.name.startswith("shard_") and p.name != SOURCE_FILE]
        if foreign:
            raise UsageError(f"--shard-dir {shard_dir} holds {foreign[:3]}, not only shards; give an empty or new "
                             "directory")
    logger.info("splitting %s into %d shards in %s", index_dir, n_shards, shard_dir)
    for stale in sorted(shard_dir.glob("shard_*")) if shard_dir.exists() else []:
        if stale not in wanted:  # from an earlier split into more shards
            _remove_tree(stale)
    (shard_dir / SOURCE_FILE).unlink(missing_ok=True)  # the shards are about to change
    paths = split_index(index, n_shards, shard_dir, overwrite=True)
    write_json(shard_dir / SOURCE_FILE, source)
    return paths


def _source(shard_dir: Path) -> dict | None:
    try:
        return read_json(shard_dir / SOURCE_FILE)
    except (FileNotFoundError, ValueError):
        return None


def _matches(index: InvertedIndex | SegmentedIndex, shard_dirs: list[Path]) -> bool:
    doc_ids: list[str] = []
    for path in shard_dirs:
        try:
            shard = InvertedIndex.load(path, mmap=True, verify=False)
        except (FileNotFoundError, IndexFormatError):
            return False
        if (shard.encoder_digest, shard.variant, shard.dim, shard.n_buckets) != \
                (index.encoder_digest, index.variant, index.dim, index.n_buckets):
            return False
        doc_ids.extend(shard.doc_ids)
    return doc_ids == live_doc_ids(index)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def open_sharded_service(encoder, index_dir: Path, n_shards: int, address: str | None, shard_dir: Path | None,
                         corpus=None, bm25=None, typical_sample: int = 0, threads_per_shard: int = 1,
                         replicas: int = 1):
    """A read-only SearchService whose index is a ShardedIndex of `index_dir` (static, or segmented: its live
    documents), each shard on `replicas` actors."""
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.serving.documents import DocumentStore
    from uhdsearch.serving.explain import TypicalTokens
    from uhdsearch.serving.service import SearchService, Snapshot

    if shard_dir is None:
        shard_dir = Path(tempfile.mkdtemp(prefix="uhdsearch-shards-"))
    positive(replicas, "--replicas")
    sharded = ShardedIndex(shard_dirs_for(index_dir, n_shards, shard_dir), address, threads_per_shard,
                           replicas=replicas)
    Searcher(encoder, sharded, max_df=None)  # dim and bucket checks now, not on the first request
    documents = DocumentStore(corpus, None)
    typical = TypicalTokens(encoder, [d.full_text for d in documents.sample(typical_sample)]) \
        if typical_sample > 0 and corpus else None
    refusal = (405, f"{index_dir} is served as {n_shards} read-only shards; serve a segmented index without "
                    "--shards to write")
    return SearchService(encoder, Snapshot(sharded, None, documents.texts), documents, None, refusal, bm25, typical)
