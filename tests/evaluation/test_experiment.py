from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from uhdsearch.evaluation.experiment import Comparison, compare, paired_ttest
from uhdsearch.evaluation.metrics import per_query
from uhdsearch.types import Query, Run, ScoredDoc, as_queries

N_QUERIES = 30
QRELS = {f"q{i}": {f"rel{i}": 1} for i in range(N_QUERIES)}


def run_with_rank(rank_of: dict[str, int], name: str) -> Run:
    """The relevant document of each query at the given 1-based rank (0 = not retrieved)."""
    results = {}
    for q, rank in rank_of.items():
        i = q[1:]
        hits = [ScoredDoc(f"junk{i}-{j}", 100.0 - j) for j in range(10)]
        if rank:
            hits.insert(rank - 1, ScoredDoc(f"rel{i}", 100.0 - rank + 1.5))
        results[q] = hits[:10]
    return Run(results, name=name)


RNG = np.random.default_rng(7)
GOOD = run_with_rank({q: int(r) for q, r in zip(QRELS, RNG.integers(1, 3, N_QUERIES))}, "good")
BAD = run_with_rank({q: int(r) for q, r in zip(QRELS, RNG.integers(0, 8, N_QUERIES))}, "bad")


class FakeRetriever:
    """A real retriever object for compare(): returns a stored run, records what it was asked."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.calls: list[tuple[list[Query], int]] = []

    def search(self, queries, k):  # noqa: ANN001, ANN201
        self.calls.append((as_queries(queries), k))
        return self.run


def test_paired_ttest_equals_scipy() -> None:
    a = {q: float(v) for q, v in zip(QRELS, RNG.random(N_QUERIES))}
    b = {q: float(v) for q, v in zip(reversed(list(QRELS)), RNG.random(N_QUERIES))}  # other key order
    keys = list(a)
    expected = stats.ttest_rel([a[q] for q in keys], [b[q] for q in keys]).pvalue
    assert paired_ttest(a, b) == pytest.approx(expected, rel=1e-12)
    assert 0.0 < paired_ttest(a, b) < 1.0


def test_paired_ttest_identical_is_one_and_tiny_is_nan() -> None:
    a = {"q1": 0.5, "q2": 0.25, "q3": 1.0}
    assert paired_ttest(a, dict(a)) == 1.0
    assert math.isnan(paired_ttest({"q1": 0.5}, {"q1": 0.7}))
    assert paired_ttest({"q1": 1.0, "q2": 2.0}, {"q1": 0.0, "q2": 1.0}) == 0.0  # constant shift


def test_paired_ttest_needs_same_queries() -> None:
    with pytest.raises(ValueError, match="1 only in the first, 0 only in the second"):
        paired_ttest({"q1": 1.0, "q2": 0.0}, {"q1": 1.0})


def test_compare_scores_and_p_values() -> None:
    retriever = FakeRetriever(BAD)
    comparison = compare(
        {"good": GOOD, "bad": retriever}, {q: "text" for q in QRELS}, QRELS, ["RR@10", "R@5"], baseline="good", k=7
    )
    assert isinstance(comparison, Comparison)
    assert len(retriever.calls) == 1 and retriever.calls[0][1] == 7 and len(retriever.calls[0][0]) == N_QUERIES
    good_rr = per_query(GOOD, QRELS, ["RR@10"])["RR@10"]
    bad_rr = per_query(BAD, QRELS, ["RR@10"])["RR@10"]
    assert comparison.scores["good"]["RR@10"] == pytest.approx(sum(good_rr.values()) / N_QUERIES)
    assert comparison.scores["bad"]["RR@10"] == pytest.approx(sum(bad_rr.values()) / N_QUERIES)
    keys = list(QRELS)
    expected_p = stats.ttest_rel([bad_rr[q] for q in keys], [good_rr[q] for q in keys]).pvalue
    assert list(comparison.p_values) == ["bad"]
    assert comparison.p_values["bad"]["RR@10"] == pytest.approx(expected_p)
    assert expected_p < 0.05
    assert comparison.runs["bad"] is BAD
    assert comparison.n_queries == N_QUERIES


def test_identical_systems_p_is_one() -> None:
    comparison = compare({"a": GOOD, "b": Run(dict(GOOD.results))}, [], QRELS, ["nDCG@10", "RR@10"])
    assert comparison.baseline == "a"  # None means the first system
    assert comparison.p_values == {"b": {"nDCG@10": 1.0, "RR@10": 1.0}}
    assert "*" not in comparison.format_table().splitlines()[2]


def test_format_table() -> None:
    comparison = compare({"good-system": GOOD, "bad": BAD}, [], QRELS, ["RR@10", "R@5"])
    table = comparison.format_table()
    lines = table.splitlines()
    assert lines[0].split() == ["system", "RR@10", "R@5"]
    assert lines[2].startswith("good-system")
    assert lines[3].startswith("bad")
    rr_bad = comparison.scores["bad"]["RR@10"]
    assert f"{rr_bad:.4f}†" in lines[3]  # significantly worse than the baseline
    assert f"{comparison.scores['good-system']['RR@10']:.4f}" in lines[2]
    assert "†" not in lines[2] and "*" not in lines[2]
    assert lines[-1].startswith("* / †: significantly better / worse than baseline 'good-system'")
    assert "30 judged queries" in lines[-1]
    # Columns line up: each measure starts at the same offset in every row.
    offset = lines[0].index("RR@10")
    assert all(line[offset - 2 : offset] == "  " and line[offset] != " " for line in (lines[2], lines[3]))


def test_better_system_marked_with_star() -> None:
    comparison = compare({"bad": BAD, "good": GOOD}, [], QRELS, ["RR@10"])
    row = comparison.format_table().splitlines()[3]
    assert row.startswith("good") and row.endswith("*")


def test_to_dict_is_json_ready() -> None:
    comparison = compare({"a": GOOD, "b": BAD}, [], {"q0": {"rel0": 1}}, ["RR@10"])
    d = comparison.to_dict()
    assert d["p_values"] == {"b": {"RR@10": None}}  # one query: no test possible
    assert d["scores"]["a"] == {"RR@10": comparison.scores["a"]["RR@10"]}
    assert d["baseline"] == "a" and d["measures"] == ["RR@10"] and d["n_queries"] == 1
    assert json.loads(json.dumps(d)) == d


def test_compare_errors() -> None:
    with pytest.raises(ValueError, match="no systems to compare"):
        compare({}, [], QRELS)
    with pytest.raises(ValueError, match=r"baseline 'bm25' is not one of the systems: a, b"):
        compare({"a": GOOD, "b": BAD}, [], QRELS, baseline="bm25")
    with pytest.raises(TypeError, match=r"system 'x' is a dict; expected a Run or an object with search"):
        compare({"x": {}}, [], QRELS)  # type: ignore[dict-item]
