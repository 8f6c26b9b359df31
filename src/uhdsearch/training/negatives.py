"""Hard-negative selection: pure functions of ranked lists and ids."""
from __future__ import annotations

import random
from collections.abc import Sequence

from uhdsearch.training.data import TrainingPair


def hard_negatives_from_rankings(
    pairs: Sequence[TrainingPair], rankings: dict[str, list[int]], positives: dict[str, set[int]],
    depth: int = 20, seed: int = 0,
) -> list[int | None]:
    """For each pair, one document row drawn from its query's top `depth` that is not a known positive.

    Args:
        rankings: query text -> ranked document rows (e.g. from BM25).
        positives: query text -> rows judged relevant (never used as negatives).
    Returns:
        one row per pair, or None where the ranking offers no negative.
    """
    rng = random.Random(seed)
    out: list[int | None] = []
    for pair in pairs:
        banned = positives.get(pair.query, set()) | {pair.doc_row}
        pool = [row for row in rankings.get(pair.query, [])[:depth] if row not in banned]
        out.append(rng.choice(pool) if pool else None)
    return out
