from __future__ import annotations

import math
from pathlib import Path

import ir_measures
import numpy as np
import pytest

from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES, evaluate, per_query
from uhdsearch.types import Run, ScoredDoc


def ranked(*doc_ids: str) -> list[ScoredDoc]:
    """Hits with strictly decreasing scores, so no tie rule is involved."""
    return [ScoredDoc(d, float(len(doc_ids) - i)) for i, d in enumerate(doc_ids)]


# Three documents d1, d2, d3; the hand computations below use trec_eval's nDCG (gain = relevance).
QRELS = {"q1": {"d1": 1, "d3": 1}, "q2": {"d2": 1}, "q3": {"d1": 2, "d2": 1}}
RUN = Run({"q1": ranked("d2", "d1", "d3"), "q2": ranked("d1", "d3", "d2"), "q3": ranked("d2", "d1", "d3")})
L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)
EXPECTED = {
    "nDCG@10": {
        "q1": (1 / L3 + 1 / L4) / (1 / L2 + 1 / L3),
        "q2": (1 / L4) / 1.0,
        "q3": (1 / L2 + 2 / L3) / (2 / L2 + 1 / L3),
    },
    "RR@10": {"q1": 1 / 2, "q2": 1 / 3, "q3": 1.0},
    "R@1": {"q1": 0.0, "q2": 0.0, "q3": 0.5},
    "R@2": {"q1": 0.5, "q2": 0.0, "q3": 1.0},
    "R@100": {"q1": 1.0, "q2": 1.0, "q3": 1.0},
}


def test_hand_computed_per_query() -> None:
    got = per_query(RUN, QRELS, list(EXPECTED))
    assert set(got) == set(EXPECTED)
    for measure, by_query in EXPECTED.items():
        assert list(got[measure]) == ["q1", "q2", "q3"]
        for q, value in by_query.items():
            assert got[measure][q] == pytest.approx(value, abs=1e-12), (measure, q)


def test_hand_computed_means() -> None:
    got = evaluate(RUN, QRELS, list(EXPECTED))
    for measure, by_query in EXPECTED.items():
        assert got[measure] == pytest.approx(sum(by_query.values()) / 3, abs=1e-12), measure
    assert got["nDCG@10"] == pytest.approx(0.6844, abs=1e-4)


def test_missing_query_counts_as_zero_and_unjudged_are_ignored() -> None:
    qrels = {**QRELS, "q4": {"d1": 1}, "q5": {"d2": 0}}  # q4: judged, not in run; q5: no relevant doc
    run = Run({**RUN.results, "q5": ranked("d2"), "q6": ranked("d1"), "q7": []})
    got = per_query(run, qrels, ["RR@10", "R@100"])
    assert got["RR@10"] == {**EXPECTED["RR@10"], "q4": 0.0}
    assert got["R@100"] == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    means = evaluate(run, qrels, ["RR@10", "R@100"])
    assert means["RR@10"] == pytest.approx((1 / 2 + 1 / 3 + 1.0 + 0.0) / 4)
    assert means["R@100"] == pytest.approx(0.75)
    # ir_measures alone averages over different queries; we must not agree with it here.
    direct = ir_measures.calc_aggregate([ir_measures.parse_measure("R@100")], qrels, run.as_dict())
    assert direct[ir_measures.parse_measure("R@100")] != pytest.approx(0.75)


def test_empty_run_scores_zero() -> None:
    assert evaluate(Run(), QRELS, ["nDCG@10", "R@100"]) == {"nDCG@10": 0.0, "R@100": 0.0}


def test_equals_ir_measures_when_every_judged_query_is_in_the_run(scifact_mini_dir: Path) -> None:
    data = load_beir(scifact_mini_dir, split="test")
    doc_ids = list(data.corpus)
    rng = np.random.default_rng(0)
    results = {}
    for q in data.qrels:
        # Random scores, with the relevant documents pushed up for some queries, so values vary.
        scores = rng.random(len(doc_ids))
        picks = np.argsort(-scores, kind="stable")[:150]
        hits = [ScoredDoc(doc_ids[i], float(scores[i])) for i in picks]
        if rng.random() < 0.5:
            boosted = [ScoredDoc(d, 2.0 + rng.random()) for d in data.qrels[q]]
            hits = boosted + [h for h in hits if h.doc_id not in data.qrels[q]]
        results[q] = hits
    run = Run(results)
    names = [*DEFAULT_MEASURES, "AP", "P@5", "nDCG@3"]
    parsed = [ir_measures.parse_measure(n) for n in names]
    direct_mean = ir_measures.calc_aggregate(parsed, data.qrels, run.as_dict())
    direct_per_query = {
        (m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(parsed, data.qrels, run.as_dict())
    }
    ours = evaluate(run, data.qrels, names)
    ours_per_query = per_query(run, data.qrels, names)
    for name, measure in zip(names, parsed):
        assert ours[name] == pytest.approx(direct_mean[measure], abs=1e-12), name
        for q, value in ours_per_query[name].items():
            assert value == pytest.approx(direct_per_query[(q, str(measure))], abs=1e-12), (name, q)
    assert 0.05 < ours["nDCG@10"] < 0.95  # the run is neither empty nor perfect


def test_map_alias_reported_under_given_name() -> None:
    got = evaluate(RUN, QRELS, ["MAP", "AP"])
    assert list(got) == ["MAP", "AP"]
    expected_ap = ((1 / 2 + 2 / 3) / 2 + 1 / 3 + (1 + 1) / 2) / 3
    assert got["MAP"] == got["AP"] == pytest.approx(expected_ap)


def test_unknown_measure() -> None:
    with pytest.raises(ValueError, match=r"unknown measure 'Foo@3'"):
        evaluate(RUN, QRELS, ["nDCG@10", "Foo@3"])
    with pytest.raises(ValueError, match=r"unknown measure 'nDCG@x'"):
        evaluate(RUN, QRELS, ["nDCG@x"])


def test_no_measures() -> None:
    with pytest.raises(ValueError, match="no measures given"):
        evaluate(RUN, QRELS, [])


def test_no_judged_query() -> None:
    with pytest.raises(ValueError, match=r"the qrels have no judged query \(none of their 1 queries"):
        evaluate(RUN, {"q1": {"d1": 0}}, ["RR@10"])


def test_tied_scores_are_ranked_in_the_runs_own_order() -> None:
    # pytrec_eval alone would put doc_id "c" first among equal scores (doc_id descending).
    run = Run({"q": [ScoredDoc("a", 1.0), ScoredDoc("b", 1.0), ScoredDoc("c", 1.0)]})
    scores = evaluate(run, {"q": {"a": 1}}, ["RR@10", "nDCG@10"])
    assert scores == {"RR@10": 1.0, "nDCG@10": 1.0}
    flipped = Run({"q": [ScoredDoc("c", 1.0), ScoredDoc("b", 1.0), ScoredDoc("a", 1.0)]})
    assert evaluate(flipped, {"q": {"a": 1}}, ["RR@10"]) == {"RR@10": pytest.approx(1 / 3)}
