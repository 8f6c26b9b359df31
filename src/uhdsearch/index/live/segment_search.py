"""Search across the segments of a segmented index: each segment's exact top-k, merged under the tie rule."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from uhdsearch.index.base import Scoring
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.kernels.heap import merge_heaps
from uhdsearch.index.kernels.lengths import length_scales
from uhdsearch.sparse import SparseEncoding

# (index, deleted mask, deleted count) of one segment; parts hold consecutive ranges of global doc numbers.
Part = tuple[InvertedIndex, np.ndarray, int]


def search_parts(
    parts: Sequence[Part],
    queries: SparseEncoding,
    k: int,
    depth: int,
    bucket_weights: Sequence[float],
    scoring: Scoring,
    deleted: np.ndarray | None,
    n_threads: int | None,
    length_norm: float = 0.0,
    documents: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-`depth` over the live documents of all parts, in global doc numbers.

    A length-normalized score is a property of the document alone, so each part's scores compare with the others'.

    Args:
        deleted: (total documents,) bool, more documents to leave out, by global doc number; or None.
        documents: (lo, hi), global doc numbers: only these are searched, each part over the 64-document words
            that hold them (the rest of a word masked).
    Returns:
        numbers (n_queries, depth) int64 and scores of the same shape float64; rows padded with -1 and 0.
    """
    numbers_parts, scores_parts = [], []
    offset = 0
    for index, mask, n_deleted in parts:
        n = index.n_documents
        span = None
        if documents is not None:
            lo, hi = max(documents[0] - offset, 0), min(documents[1] - offset, n)
            if lo >= hi:
                offset += n
                continue
            span = (lo - lo % 64, hi)
            mask = mask.copy()
            mask[span[0]:lo] = True
            n_deleted = int(mask.sum())
        if deleted is not None:
            mask = mask | deleted[offset:offset + n]
            n_deleted = int(mask.sum())
        if n_deleted < n:
            numbers, scores = index.search_encoded(queries, k, bucket_weights, scoring,
                                                   deleted=mask if n_deleted else None, n_threads=n_threads,
                                                   length_norm=length_norm, documents=span)
            numbers_parts.append(np.where(numbers >= 0, numbers + offset, -1))
            scores_parts.append(scores)
        offset += n
    return merge_top(numbers_parts, scores_parts, queries.n, depth)


def merge_top(
    numbers_parts: list[np.ndarray], scores_parts: list[np.ndarray], n_queries: int, depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-segment top-k lists (global numbers, -1 padding) into one with the kernels' heap merge."""
    if not numbers_parts or depth == 0:
        return np.full((n_queries, depth), -1, np.int64), np.zeros((n_queries, depth), np.float64)
    # Each segment's list is exact and segments hold disjoint ascending number ranges, so the head of the
    # merged order (score desc, then number asc; padding last) is the exact global top-k.
    return merge_heaps(np.concatenate(numbers_parts, axis=1), np.concatenate(scores_parts, axis=1), depth)


def live_document_frequencies(parts: Sequence[Part], dim: int, bucket: int) -> np.ndarray:
    """(dim,) int64 number of live documents in which each dimension of `bucket` is active."""
    total = np.zeros(dim, np.int64)
    for index, mask, n_deleted in parts:
        total += np.asarray(index.document_frequencies(bucket), dtype=np.int64)
        if n_deleted:
            gone = index.document_vectors().buckets[bucket][np.flatnonzero(mask)]
            total -= np.bincount(gone.indices, minlength=dim)
    return total


def overlap_counts_parts(parts: Sequence[Part], query: SparseEncoding, numbers: np.ndarray,
                         quantized: bool) -> np.ndarray:
    """InvertedIndex.overlap_counts over parts, for global doc numbers."""
    numbers = np.asarray(numbers, np.int64)
    counts = np.zeros((query.n_buckets, numbers.shape[0]), np.int64)
    offset = 0
    for index, _, _ in parts:
        n = index.n_documents
        inside = np.flatnonzero((numbers >= offset) & (numbers < offset + n))
        if inside.size:
            counts[:, inside] = index.overlap_counts(query, numbers[inside] - offset, quantized)
        offset += n
    return counts


def parts_length_scales(parts: Sequence[Part], alpha: float,
                        n_buckets: int) -> list[tuple[np.ndarray, ...]]:
    """Per bucket, the parts' length scales (kernels/lengths.py) concatenated in global doc numbers."""
    out = []
    for b in range(n_buckets):
        lengths = [index.document_lengths(b) for index, _, _ in parts]
        out.append(length_scales(np.concatenate(lengths) if lengths else np.zeros(0, np.int64), alpha))
    return out


class KeptScales:
    """The last `parts_length_scales`, kept while the parts are the same index objects (the cascade asks once per
    search, and computing them takes ~13 ms per 200k documents). One tuple, replaced whole: safe across threads."""

    def __init__(self) -> None:
        self._kept: tuple[float, list, list[tuple[np.ndarray, ...]]] | None = None

    def get(self, parts: Sequence[Part], alpha: float, n_buckets: int) -> list[tuple[np.ndarray, ...]]:
        indexes = [p[0] for p in parts]
        kept = self._kept
        if kept is None or kept[0] != float(alpha) or len(kept[1]) != len(indexes) or any(
                a is not b for a, b in zip(kept[1], indexes)):
            kept = self._kept = (float(alpha), indexes, parts_length_scales(parts, alpha, n_buckets))
        return kept[2]
