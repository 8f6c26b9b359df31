"""Export an index's document vectors to Milvus as SPARSE_FLOAT_VECTOR with inner-product search (pymilvus).

Buckets become one vector: bucket b's dimension d is Milvus dimension b * dim + d, so a query whose bucket-b values
are multiplied by the bucket weight gets Milvus's inner product = Eq. 7, the weighted index's score. Binary scoring
maps the same way with every weight 1.0: a binary index exports 1.0 for each active dimension, and a query of 1.0s
(times the bucket weights) scores the number of shared active dimensions. `milvus_query` builds such queries.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from uhdsearch._optional import require
from uhdsearch.errors import UsageError
from uhdsearch.index.impacts import refuse_planes
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.scale.cluster import positive
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)

ID_FIELD = "doc_id"
VECTOR_FIELD = "vector"
MAX_ID_LENGTH = 512  # VARCHAR primary key length in Milvus


def export_to_milvus(
    index: InvertedIndex | str | os.PathLike, uri: str, collection: str, batch_size: int = 1000,
    overwrite: bool = False, show_progress: bool = True,
) -> dict[str, Any]:
    """Write every document of `index` into the Milvus collection `collection` at `uri`.

    Args:
        uri: a milvus-lite file ("uhd.db") or a server URL ("http://host:19530").
        batch_size: documents per insert call.
        overwrite: drop an existing collection of that name first.
    Returns:
        {"collection", "n_documents" (inserted), "skipped" (doc ids with no active dimension: Milvus refuses
        empty sparse vectors, and they could never score above 0), "dim" (n_buckets * dim)}.
    Raises:
        UsageError: the collection exists and overwrite is False; a doc id longer than 512 characters.
    """
    pymilvus = require("pymilvus", "milvus")
    positive(batch_size, "batch_size")
    if not isinstance(index, InvertedIndex):
        index = InvertedIndex.load(index)
    refuse_planes(index, "the Milvus export")
    too_long = [d for d in index.doc_ids if len(d) > MAX_ID_LENGTH]
    if too_long:
        raise UsageError(f"{len(too_long)} doc_ids are longer than Milvus's {MAX_ID_LENGTH}, e.g. {too_long[0][:40]!r}")
    client = pymilvus.MilvusClient(uri)
    try:
        if client.has_collection(collection):
            if not overwrite:
                raise UsageError(f"collection {collection!r} already exists at {uri}; pass overwrite=True "
                                 "(CLI: --overwrite) to replace it")
            client.drop_collection(collection)
        _create(client, pymilvus.DataType, collection)
        vectors = joined_buckets(index.document_vectors())
        active = np.diff(vectors.indptr) > 0
        skipped = [d for d, a in zip(index.doc_ids, active) if not a]
        rows = np.flatnonzero(active)
        bar = tqdm(total=len(rows), desc=f"export to milvus:{collection}", unit="doc", disable=not show_progress)
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            client.insert(collection, [{ID_FIELD: index.doc_ids[i], VECTOR_FIELD: vectors[i]} for i in chunk])
            bar.update(len(chunk))
        bar.close()
        client.flush(collection)
    finally:
        client.close()
    if skipped:
        logger.warning("%d documents have no active dimension and were not exported, e.g. %s", len(skipped),
                       skipped[:5])
    return {"collection": collection, "n_documents": int(len(rows)), "skipped": skipped,
            "dim": int(vectors.shape[1])}


def _create(client, data_type, collection: str) -> None:
    schema = client.create_schema(auto_id=False)
    schema.add_field(ID_FIELD, data_type.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
    schema.add_field(VECTOR_FIELD, data_type.SPARSE_FLOAT_VECTOR)
    params = client.prepare_index_params()
    params.add_index(field_name=VECTOR_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
    client.create_collection(collection, schema=schema, index_params=params)


def joined_buckets(encoding: SparseEncoding, bucket_weights: Sequence[float] | None = None) -> sp.csr_matrix:
    """(n, n_buckets * dim) float32 CSR: the buckets side by side, bucket b scaled by bucket_weights[b]."""
    weights = [1.0] * encoding.n_buckets if bucket_weights is None else list(bucket_weights)
    if len(weights) != encoding.n_buckets:
        raise UsageError(f"{len(weights)} bucket weights for {encoding.n_buckets} buckets")
    return sp.hstack([m * np.float32(w) for m, w in zip(encoding.buckets, weights)], format="csr",
                     dtype=np.float32)


def milvus_query(encoded: SparseEncoding, bucket_weights: Sequence[float], binary: bool = False) -> list[dict]:
    """Encoded queries -> Milvus sparse query vectors ({dimension: value}); binary=True: every value 1.0."""
    if binary:
        encoded = encoded.binarize()
    matrix = joined_buckets(encoded, bucket_weights)
    return [{int(d): float(v) for d, v in zip(matrix.indices[matrix.indptr[i]:matrix.indptr[i + 1]],
                                              matrix.data[matrix.indptr[i]:matrix.indptr[i + 1]])}
            for i in range(matrix.shape[0])]


def search_milvus(uri: str, collection: str, queries: list[dict], k: int) -> list[list[tuple[str, float]]]:
    """Exact inner-product top-k per query (drop_ratio_search 0: no query dimension dropped)."""
    pymilvus = require("pymilvus", "milvus")
    client = pymilvus.MilvusClient(uri)
    try:
        results = client.search(collection, data=queries, anns_field=VECTOR_FIELD, limit=k,
                                search_params={"metric_type": "IP", "params": {"drop_ratio_search": 0.0}})
    finally:
        client.close()
    return [[(hit[ID_FIELD] if ID_FIELD in hit else hit["id"], float(hit["distance"])) for hit in hits]
            for hits in results]
