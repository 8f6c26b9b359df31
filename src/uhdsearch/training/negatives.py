"""Hard-negative selection: pure functions of ranked lists and ids. A judged positive is never a negative."""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from uhdsearch.training.data import TrainingPair


def hard_negatives_from_rankings(
    pairs: Sequence[TrainingPair], rankings: Mapping[str, Sequence[int]], positives: Mapping[str, set[int]],
    depth: int = 20, seed: int = 0, skip: int = 0,
) -> list[int | None]:
    """For each pair, one document row drawn from its query's ranks skip..depth that is not a known positive.

    Args:
        rankings: query text -> ranked document rows (e.g. from BM25 or a teacher, `TeacherRankings.as_dict`).
        positives: query text -> rows judged relevant (never used as negatives); the pair's own document
            (an ICT pair's source passage) is never used either.
        skip: ranks left out at the top: a teacher's very first hits are often unjudged positives (RocketQA).
    Returns:
        one row per pair, or None where the ranking offers no negative.
    """
    rng = random.Random(seed)
    out: list[int | None] = []
    for pair in pairs:
        banned = positives.get(pair.query, set()) | {pair.doc_row}
        pool = [row for row in list(rankings.get(pair.query, []))[skip:depth] if row not in banned]
        out.append(rng.choice(pool) if pool else None)
    return out


def positives_by_query(pairs: Sequence[TrainingPair]) -> dict[str, set[int]]:
    """query text -> the rows it is paired with (its judged positives, or an ICT query's source passage)."""
    positives: dict[str, set[int]] = {}
    for p in pairs:
        positives.setdefault(p.query, set()).add(p.doc_row)
    return positives


def teacher_negatives(
    pairs: Sequence[TrainingPair], rankings, positives: Mapping[str, set[int]] | None = None, depth: int = 30,
    skip: int = 0, seed: int = 0,
) -> list[int | None]:
    """One teacher-mined negative per pair from a `TeacherRankings` (or a query -> rows mapping).

    The pairs' own positives are always banned; pass `positives` to ban more (every judged positive of all
    splits, when known).
    """
    ranked = rankings.as_dict() if hasattr(rankings, "as_dict") else rankings
    banned = positives_by_query(pairs)
    for query, rows in (positives or {}).items():
        banned.setdefault(query, set()).update(rows)
    positives = banned
    return hard_negatives_from_rankings(pairs, ranked, positives, depth=depth, seed=seed, skip=skip)
