"""Integer query weights over binary documents: each weight level becomes one more bucket of the bit-sliced adder.

A query whose dims carry small integer weights (quantized IDF) scores sum(weight of each shared dim). Split by
weight level v, that is sum over v of v x (binary overlap with the dims of level v): every bitmap row is read
once, as in a binary query, and each level keeps its own bit planes. The kernels see the split as extra
buckets over the same postings with bucket weights v, so the scores are exact integers (float64 sums of them).
Every bucket always gets all MAX_LEVEL virtual buckets, empty ones included (the kernels skip those at no cost):
numba compiles the kernels once per number of buckets, ~20 s each on 2 cores.
Measured at 100k documents (benchmarks/stop_dims_speed.py) this is ~120x a binary query, not binary speed: with
several buckets the kernels bound each 64-document word by the sum of every level's largest count, which prunes
almost nothing, so every word's counters are extracted. Summing the level planes into one bit-sliced counter
(shifted adds) before the one-bucket comparator is the fix still to make.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.sparse import SparseEncoding

MAX_LEVEL = 15  # 4-bit weights


def check_levels(queries: SparseEncoding) -> int:
    """The largest weight level of `queries`; raises UsageError unless every value is an integer in 1..15."""
    top = 0
    for m in queries.buckets:
        if m.nnz == 0:
            continue
        data = np.asarray(m.data)
        if np.any(data < 1) or np.any(data > MAX_LEVEL) or np.any(data != np.round(data)):
            raise UsageError(f"quantized scoring needs integer query values in 1..{MAX_LEVEL}; got values from "
                             f"{float(data.min())} to {float(data.max())}")
        top = max(top, int(data.max()))
    return top


def level_arrays(queries: SparseEncoding) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Query arrays (qptr, qdims, qvals) over n_buckets x MAX_LEVEL virtual buckets, ordered (query, bucket, level).

    Virtual bucket b MAX_LEVEL + v - 1 holds the dims of bucket b whose level is v (values 1.0 for the kernels).
    """
    check_levels(queries)
    n_virtual = queries.n_buckets * MAX_LEVEL
    rows, dims, keys = [], [], []
    for b, m in enumerate(queries.buckets):
        m = m.tocsr()
        rows.append(np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr)))
        dims.append(np.asarray(m.indices, np.int64))
        keys.append(b * MAX_LEVEL + np.asarray(m.data).astype(np.int64) - 1)
    row, dim, key = np.concatenate(rows), np.concatenate(dims), np.concatenate(keys)
    slot = row * n_virtual + key
    order = np.argsort(slot, kind="stable")
    counts = np.bincount(slot, minlength=queries.n * n_virtual)
    qptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return qptr, dim[order], np.ones(order.shape[0], np.float32)


def level_weights(bucket_weights: Sequence[float]) -> tuple[list[int], list[float]]:
    """(source bucket, weight) of each virtual bucket: bucket_weights[b] x v for level v of bucket b."""
    sources = [b for b in range(len(bucket_weights)) for _ in range(MAX_LEVEL)]
    weights = [float(w) * v for w in bucket_weights for v in range(1, MAX_LEVEL + 1)]
    return sources, weights
