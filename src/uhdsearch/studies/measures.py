"""The studies' measures with a known answer: rank-based errors, the false-positive probability of a random
vector (Reimers & Gurevych Eq. 1) and the normalized margin of a triple (Luan et al. §3)."""
from __future__ import annotations

import numpy as np
from scipy.special import betainc

from uhdsearch.errors import UsageError

CUTOFF = 10  # RR@10: a relevant document below rank 10 counts as not found


def reciprocal_ranks(ranks: np.ndarray, cutoff: int = CUTOFF) -> np.ndarray:
    """1/rank per query, 0 where the first relevant document is below `cutoff` (ranks start at 1).

    Examples:
        >>> reciprocal_ranks(np.array([1, 2, 11])).tolist()
        [1.0, 0.5, 0.0]
    """
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.size and ranks.min() < 1:
        raise UsageError(f"ranks start at 1; got {ranks.min()}")
    return np.where(ranks <= cutoff, 1.0 / ranks, 0.0)


def error_rate(ranks: np.ndarray, cutoff: int = CUTOFF) -> float:
    """Reimers & Gurevych's Err = mean(1 - 1/rank), a rank over `cutoff` counted as infinite (error 1).

    Examples:
        >>> error_rate(np.array([1, 2, 4, 50]))   # (0 + 1/2 + 3/4 + 1) / 4
        0.5625
    """
    return float(np.mean(1.0 - reciprocal_ranks(ranks, cutoff))) if len(ranks) else float("nan")


def relative_error(err: float, err_baseline: float) -> float:
    """(Err - Err_baseline) / Err_baseline: how much more often (in their Err sense) a system fails than BM25.

    Examples:
        >>> relative_error(0.6, 0.5)
        0.19999999999999996
    """
    return (err - err_baseline) / err_baseline if err_baseline > 0 else float("nan")


def ranks_of_first_relevant(doc_scores: np.ndarray, relevant_scores: np.ndarray) -> np.ndarray:
    """Rank of the best relevant document among `doc_scores` (n_queries, n_docs) of the other documents:
    1 + how many score strictly higher (ties go to the relevant document, which comes first in the index)."""
    return 1 + (doc_scores > relevant_scores[:, None]).sum(axis=1)


def false_positive_probability(cos_theta: np.ndarray | float, k: np.ndarray | int) -> np.ndarray:
    """Probability that a uniformly random unit vector in k dimensions has cosine above cos(theta) with a fixed
    vector: 1/2 I_{sin^2 theta}((k-1)/2, 1/2) (Reimers & Gurevych Eq. 1); past 90 degrees, 1 minus that.

    Examples:
        >>> round(float(false_positive_probability(0.0, 128)), 6)   # orthogonal: half of all vectors lie above
        0.5
        >>> float(false_positive_probability(0.5, 768)) < 1e-40
        True
    """
    cos_theta = np.asarray(cos_theta, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    if np.any(k < 2):
        raise UsageError("the dimension k must be at least 2")
    if np.any(np.abs(cos_theta) > 1 + 1e-9):
        raise UsageError("a cosine lies in [-1, 1]")
    sin2 = np.clip(1.0 - cos_theta ** 2, 0.0, 1.0)
    half = 0.5 * betainc((k - 1) / 2, 0.5, sin2)
    return np.where(cos_theta >= 0, half, 1.0 - half)


def normalized_margin(q: np.ndarray, d1: np.ndarray, d2: np.ndarray) -> float:
    """Luan et al.'s delta(q, d1, d2) = q.(d1 - d2) / (|q| |d1 - d2|); 0 when d1 == d2 or q is zero.

    Examples:
        >>> normalized_margin(np.array([1., 1, 0]), np.array([1., 1, 0]), np.array([1., 0, 0]))
        0.7071067811865475
    """
    q, diff = np.asarray(q, dtype=np.float64), np.asarray(d1, dtype=np.float64) - np.asarray(d2, dtype=np.float64)
    norm = np.linalg.norm(q) * np.linalg.norm(diff)
    return float(q @ diff / norm) if norm > 0 else 0.0
