"""Teacher-mined negatives are never a judged positive nor the pair's own source document."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.training.data import TrainingPair
from uhdsearch.training.negatives import hard_negatives_from_rankings, positives_by_query, teacher_negatives
from uhdsearch.recipes.teachers import TeacherRankings

QUERIES = ["q0", "q1", "q2"]


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.sampled_from(QUERIES), st.integers(0, 15)), min_size=1, max_size=12),
    rankings=st.fixed_dictionaries({q: st.lists(st.integers(0, 15), max_size=16, unique=True) for q in QUERIES}),
    judged=st.fixed_dictionaries({q: st.sets(st.integers(0, 15), max_size=6) for q in QUERIES}),
    depth=st.integers(1, 16), skip=st.integers(0, 4), seed=st.integers(0, 3),
)
def test_teacher_negative_is_never_a_positive(pairs, rankings, judged, depth, skip, seed):
    pairs = [TrainingPair(q, r) for q, r in pairs]
    out = teacher_negatives(pairs, rankings, judged, depth=depth, skip=skip, seed=seed)
    own = positives_by_query(pairs)
    assert len(out) == len(pairs)
    for pair, negative in zip(pairs, out):
        window = rankings[pair.query][skip:depth]
        allowed = [r for r in window if r not in judged[pair.query] and r not in own[pair.query]]
        if negative is None:
            assert allowed == []
        else:
            assert negative in allowed  # from the ranking's window, never judged, never any of the query's own


def test_teacher_negatives_from_teacher_rankings():
    ranked = TeacherRankings("t", ["q"], np.array([[5, 1, 2, -1]]), np.array([[3.0, 2.0, 1.0, -np.inf]], np.float32))
    pairs = [TrainingPair("q", 1), TrainingPair("q", 7)]
    # both pairs ban rows 1 and 7 (the query's own); skip=1 drops row 5; row 2 is left
    assert teacher_negatives(pairs, ranked, depth=4, skip=1) == [2, 2]
    assert teacher_negatives(pairs, ranked, {"q": {2}}, depth=4, skip=1) == [None, None]


def test_skip_zero_keeps_the_old_behaviour():
    pairs = [TrainingPair("q", 0), TrainingPair("r", 3)]
    assert hard_negatives_from_rankings(pairs, {"q": [0, 1, 2], "r": [3]}, {"q": {0, 1}}, depth=3) == [2, None]
