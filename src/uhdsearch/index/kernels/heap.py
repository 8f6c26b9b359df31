"""The one top-k heap of the kernels and the merge of heaps, under the one tie rule: score desc, doc number asc.

A heap's root is its worst kept hit. Padding (doc -1, score 0) sorts last.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _worse(score_a, doc_a, score_b, doc_b):
    return score_a < score_b or (score_a == score_b and doc_a > doc_b)


@numba.njit(cache=True)
def _sift_down(scores, docs, size, i):
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and _worse(scores[right], docs[right], scores[left], docs[left]):
            child = right
        if _worse(scores[child], docs[child], scores[i], docs[i]):
            scores[i], scores[child] = scores[child], scores[i]
            docs[i], docs[child] = docs[child], docs[i]
            i = child
        else:
            return


@numba.njit(cache=True)
def push(scores, docs, size, k, score, doc):
    """Offer a hit; docs arrive in ascending order, so an equal score never displaces a kept hit."""
    if size < k:
        i = size
        scores[i] = score
        docs[i] = doc
        while i > 0:
            parent = (i - 1) // 2
            if _worse(scores[i], docs[i], scores[parent], docs[parent]):
                scores[i], scores[parent] = scores[parent], scores[i]
                docs[i], docs[parent] = docs[parent], docs[i]
                i = parent
            else:
                break
        return size + 1
    if score > scores[0]:
        scores[0] = score
        docs[0] = doc
        _sift_down(scores, docs, size, 0)
    return size


@numba.njit(cache=True)
def sort_heaps(docs, scores, depth):
    """Rows of (doc, score) heap entries -> the best `depth` by score desc, doc asc; padding (doc -1) last.

    numba rather than np.lexsort: a single query's five numpy calls took ~35 us, a tenth of a 10k search.
    """
    n_q, width = docs.shape
    out_docs = np.full((n_q, depth), -1, np.int64)
    out_scores = np.zeros((n_q, depth), np.float64)
    key = np.empty(width, np.float64)
    for q in range(n_q):
        by_doc = np.argsort(docs[q])  # ascending doc first, then a stable sort by score keeps that order on ties
        for i in range(width):
            d = docs[q, by_doc[i]]
            key[i] = -scores[q, by_doc[i]] if d >= 0 else np.inf
        order = np.argsort(key[:width], kind="mergesort")
        for i in range(min(depth, width)):
            j = by_doc[order[i]]
            if docs[q, j] < 0:
                break
            out_docs[q, i] = docs[q, j]
            out_scores[q, i] = scores[q, j]
    return out_docs, out_scores


def merge_heaps(docs: np.ndarray, scores: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(n_q, ..., width) hits with -1 padding -> (n_q, depth) by score desc, doc asc; padding -1 / 0 last.

    Merges the per-range heaps of one search and the per-segment results of a segmented index alike.
    """
    n_q = docs.shape[0]
    return sort_heaps(np.ascontiguousarray(docs, np.int64).reshape(n_q, -1),
                      np.ascontiguousarray(scores, np.float64).reshape(n_q, -1), depth)
