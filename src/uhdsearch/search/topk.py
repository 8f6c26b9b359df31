"""Top-k with a fixed tie rule: score descending, then internal doc number ascending."""
from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The k best documents of one query without a full sort.

    Args:
        scores: (n_docs,) float scores.
        k: result depth, > 0.
        positive_only: drop documents scoring <= 0 (they share no active dimension with the query).
    Returns:
        doc numbers (<= k,) int64 and their scores (<= k,) float32, best first.

    Example:
        >>> top_k(np.array([1.0, 3.0, 3.0, 0.0]), 2)
        (array([1, 2]), array([3., 3.], dtype=float32))
    """
    if k <= 0:
        raise ValueError(f"k={k} must be positive")
    candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(scores.shape[0])
    values = scores[candidates]
    if candidates.shape[0] > k:
        # Everything scoring at least the k-th best value, so ties at the cut are all kept for the tie rule.
        kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
        keep = values >= kth
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:k]
    return candidates[order].astype(np.int64), values[order].astype(np.float32)
