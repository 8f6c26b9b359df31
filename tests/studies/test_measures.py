"""The measures with a known answer: Err and relative Err on hand ranks, Eq. 1 against Monte Carlo, delta on
hand-made triples."""
from __future__ import annotations

import numpy as np
import pytest

from uhdsearch.errors import UsageError
from uhdsearch.studies import measures


def test_err_and_rr_on_hand_ranks() -> None:
    ranks = np.array([1, 1, 2, 5, 10, 11, 1000])
    # 1/rank: 1, 1, .5, .2, .1, then 0 twice (beyond 10 the rank is infinite)
    assert measures.reciprocal_ranks(ranks).tolist() == [1.0, 1.0, 0.5, 0.2, 0.1, 0.0, 0.0]
    assert measures.error_rate(ranks) == pytest.approx((0 + 0 + 0.5 + 0.8 + 0.9 + 1 + 1) / 7)


def test_relative_error_against_a_baseline() -> None:
    bm25 = measures.error_rate(np.array([1, 2]))      # 0.25
    dense = measures.error_rate(np.array([2, 20]))    # 0.75
    assert measures.relative_error(dense, bm25) == pytest.approx(2.0)
    assert measures.relative_error(bm25, bm25) == 0.0


def test_ranks_count_only_strictly_higher_scores() -> None:
    scores = np.array([[0.9, 0.5, 0.5, 0.1], [0.0, 0.0, 0.0, 0.0]])
    assert measures.ranks_of_first_relevant(scores, np.array([0.5, 0.0])).tolist() == [2, 1]


def test_ranks_below_one_are_refused() -> None:
    with pytest.raises(UsageError):
        measures.error_rate(np.array([0, 1]))


@pytest.mark.parametrize("k,cos", [(3, 0.5), (8, 0.3), (32, 0.2), (128, 0.1)])
def test_eq1_matches_monte_carlo_on_random_unit_vectors(k: int, cos: float) -> None:
    rng = np.random.default_rng(k)
    x = rng.standard_normal((200_000, k))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    above = np.mean(x[:, 0] > cos)  # the fixed vector is e1; its angle with the threshold is arccos(cos)
    expected = measures.false_positive_probability(cos, k)
    assert above == pytest.approx(float(expected), abs=4 * np.sqrt(expected * (1 - expected) / len(x)) + 1e-4)


def test_eq1_past_ninety_degrees_is_the_complement() -> None:
    p = measures.false_positive_probability(np.array([0.3, -0.3]), 16)
    assert p[0] + p[1] == pytest.approx(1.0)
    assert measures.false_positive_probability(1.0, 16) == 0.0


def test_normalized_margin_on_hand_made_triples() -> None:
    # q.(d1-d2) = 1, |q| = sqrt(2), |d1-d2| = 1
    assert measures.normalized_margin([1, 1, 0], [1, 1, 0], [1, 0, 0]) == pytest.approx(1 / np.sqrt(2))
    # d2 ranks above d1: negative margin; q orthogonal to the difference: 0
    assert measures.normalized_margin([1, 0, 0], [0, 1, 0], [1, 0, 0]) == pytest.approx(-1 / np.sqrt(2))
    assert measures.normalized_margin([1, 0, 0], [0, 1, 0], [0, 0, 1]) == 0.0
    # scale-free in q and the same direction of d1 - d2
    assert measures.normalized_margin([3, 4, 0], [2, 0, 1], [0, 0, 1]) == pytest.approx(0.6)
    assert measures.normalized_margin([1, 1], [1, 1], [1, 1]) == 0.0


def test_projection_errors_fall_with_k_and_follow_the_margin() -> None:
    """A wide-margin triple is kept by small projections; a narrow one needs many more dimensions."""
    import scipy.sparse as sp

    from uhdsearch.studies.fidelity import minimum_k, projection_errors

    q = sp.csr_matrix(np.array([[1, 1, 1, 1, 0, 0, 0, 0]], np.float32))
    docs = sp.csr_matrix(np.array([[1, 1, 1, 1, 0, 0, 0, 0],    # d0: all of q
                                   [0, 0, 0, 0, 1, 1, 1, 1],    # d1: none of q (wide margin against d0)
                                   [1, 1, 1, 0, 1, 1, 1, 1]],   # d2: 3 of 4 terms (narrow against d0)
                                  np.float32))
    ks = np.array([1, 4, 16, 64, 256, 1024])
    errors, deltas = projection_errors(q, docs, np.array([[0, 0, 1], [0, 0, 2]]), ks, 200,
                                       np.random.default_rng(0))
    assert deltas[0] == pytest.approx(4 / (2 * np.sqrt(8)))   # q.(d0-d1) = 4, |q| = 2, |d0-d1| = sqrt(8)
    assert deltas[1] == pytest.approx(1 / (2 * np.sqrt(5)))
    assert errors[0, -1] < 0.05 and errors[1, 0] > 0.2
    assert np.all(np.diff(errors[0]) <= 0.1)  # more rows, no more errors (beyond sampling noise)
    kmin = minimum_k(errors, ks, 0.05)
    assert kmin[0] < kmin[1]
