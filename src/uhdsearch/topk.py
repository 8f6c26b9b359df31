"""The one tie rule for ranking score arrays: score descending, then doc number ascending.

Every retriever that ranks numpy scores uses `top_k` or `tie_order`; the numba kernels in index/ apply the same
rule inside their heaps.
"""
from __future__ import annotations

import numpy as np

from uhdsearch.errors import UsageError


def tie_order(scores: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Positions that sort `scores` best first, equal scores by `numbers` ascending.

    Examples:
        >>> tie_order(np.array([1.0, 3.0, 3.0]), np.array([7, 9, 4]))
        array([2, 1, 0])
    """
    return np.lexsort((numbers, -scores))


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The k best documents of one query without a full sort.

    Args:
        scores: (n_docs,) float scores.
        k: result depth, > 0.
        positive_only: drop documents scoring <= 0 (they share no active dimension with the query).
    Returns:
        doc numbers (<= k,) int64 and their scores (<= k,) float32, best first.

    Examples:
        >>> top_k(np.array([1.0, 3.0, 3.0, 0.0]), 2)
        (array([1, 2]), array([3., 3.], dtype=float32))
    """
    if k <= 0:  # callers check k with types.check_k; this guards the primitive itself
        raise UsageError(f"k={k} must be positive")
    candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(scores.shape[0])
    values = scores[candidates]
    if candidates.shape[0] > k:
        # Everything scoring at least the k-th best value, so ties at the cut are all kept for the tie rule.
        kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
        keep = values >= kth
        candidates, values = candidates[keep], values[keep]
    order = tie_order(values, candidates)[:k]
    return candidates[order].astype(np.int64), values[order].astype(np.float32)
