"""Hybrid retrieval: weight 0 / 1 reproduce the parts, linear fusion by hand, RRF against ranx and by hand."""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.baselines.hybrid import HybridRetriever, fuse_linear, fuse_rrf
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.types import Run, ScoredDoc


@pytest.fixture(scope="module")
def parts(mini_data, tiny_backbone_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_dir)
    words = BM25Retriever.build(mini_data.corpus, show_progress=False)
    pieces = BM25Retriever.build(mini_data.corpus, analyzer=wordpiece_analyzer(tokenizer, bigrams=True),
                                 name="bm25-bi", show_progress=False)
    return words, pieces


@pytest.mark.parametrize("k", [1, 10, 50])
def test_weight_one_and_zero_equal_the_parts(parts, mini_data, k):
    words, pieces = parts
    queries = mini_data.queries[:15]
    for weight, part in ((1.0, words), (0.0, pieces)):
        for depth in (k, 100):
            hybrid = HybridRetriever(words, pieces, weight=weight, depth=depth)
            got, expected = hybrid.search(queries, k), part.search(queries, k, show_progress=False)
            for q in queries:
                assert got.doc_ids(q.query_id) == expected.doc_ids(q.query_id)


def test_linear_fusion_by_hand():
    a = Run({"q": [ScoredDoc("d1", 9.0), ScoredDoc("d2", 5.0), ScoredDoc("d3", 1.0)]})
    b = Run({"q": [ScoredDoc("d3", 0.9), ScoredDoc("d4", 0.1)]})
    # min-max: a -> d1 1, d2 0.5, d3 0; b -> d3 1, d4 0; missing = 0.
    fused = fuse_linear(a, b, 0.25, k=4)["q"]
    assert [h.doc_id for h in fused] == ["d3", "d1", "d2", "d4"]
    assert [h.score for h in fused] == pytest.approx([0.75, 0.25, 0.125, 0.0])
    raw = fuse_linear(a, b, 0.5, k=4, normalization="none")["q"]  # Luan's raw combination
    assert [(h.doc_id, h.score) for h in raw] == [("d1", 4.5), ("d2", 2.5), ("d3", pytest.approx(0.95)),
                                                  ("d4", 0.05)]
    with pytest.raises(ValueError, match="weight=1.5 must be between 0 and 1"):
        fuse_linear(a, b, 1.5, k=4)
    with pytest.raises(ValueError, match="normalization='z'"):
        fuse_linear(a, b, 0.5, k=4, normalization="z")


def test_rrf_by_hand():
    a = Run({"q": [ScoredDoc("d1", 3.0), ScoredDoc("d2", 2.0), ScoredDoc("d3", 1.0)],
             "r": [ScoredDoc("x", 1.0)]})
    b = Run({"q": [ScoredDoc("d3", 5.0), ScoredDoc("d4", 1.0)], "r": []})
    got = fuse_rrf(a, b, k=10, rrf_k=60)
    expected = {"d3": 1 / 63 + 1 / 61, "d1": 1 / 61, "d2": 1 / 62, "d4": 1 / 62}
    assert [h.doc_id for h in got["q"]] == ["d3", "d1", "d2", "d4"]  # d2 / d4 tie: first run's rank first
    assert {h.doc_id: h.score for h in got["q"]} == pytest.approx(expected)
    assert [(h.doc_id, h.score) for h in got["r"]] == [("x", pytest.approx(1 / 61))]
    assert [h.doc_id for h in fuse_rrf(a, b, k=2)["q"]] == ["d3", "d1"]
    with pytest.raises(ValueError, match="rrf_k=-1 must be >= 0"):
        fuse_rrf(a, b, k=2, rrf_k=-1)


@pytest.mark.slow
def test_rrf_equals_ranx():
    """One query: ranx's numba kernels compile per process, for minutes once it goes parallel (many queries)."""
    import ranx

    a = Run({"q": [ScoredDoc("d1", 3.0), ScoredDoc("d2", 2.0), ScoredDoc("d3", 1.0), ScoredDoc("d5", 0.5)]})
    b = Run({"q": [ScoredDoc("d3", 5.0), ScoredDoc("d4", 1.0), ScoredDoc("d1", 0.2)]})
    direct = ranx.fuse(runs=[ranx.Run(a.as_dict()), ranx.Run(b.as_dict())], method="rrf", norm=None,
                       params={"k": 10}).to_dict()["q"]
    got = fuse_rrf(a, b, k=10, rrf_k=10)["q"]
    assert {h.doc_id: h.score for h in got} == pytest.approx(dict(direct))
    assert [h.score for h in got] == pytest.approx(sorted(direct.values(), reverse=True))


def test_docstring_examples():
    import doctest

    import uhdsearch.baselines.hybrid

    result = doctest.testmod(uhdsearch.baselines.hybrid)
    assert result.attempted > 0 and result.failed == 0


def test_tune_picks_the_best_dev_weight(parts, mini_data):
    words, pieces = parts
    dev = mini_data.queries[:20]
    qrels = {q.query_id: mini_data.qrels[q.query_id] for q in dev}
    hybrid = HybridRetriever.tune(words, pieces, dev, qrels, grid=(0.0, 0.5, 1.0), depth=50, name="h")
    run_a, run_b = words.search(dev, 50, show_progress=False), pieces.search(dev, 50, show_progress=False)
    expected = {w: evaluate(fuse_linear(run_a, run_b, w, 50), qrels, ["nDCG@10"])["nDCG@10"] for w in (0, .5, 1)}
    assert hybrid.dev_scores == pytest.approx(expected)
    assert hybrid.weight == max(expected, key=expected.get)
    assert hybrid.search(dev, 7).name == "h"


def test_errors_and_edges(parts):
    words, pieces = parts
    with pytest.raises(ValueError, match="method='sum'"):
        HybridRetriever(words, pieces, method="sum")
    with pytest.raises(TypeError, match="no search"):
        HybridRetriever(words, object())
    hybrid = HybridRetriever(words, pieces)
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        hybrid.search({"q": "x"}, 0)
    run = hybrid.search({"e": " ", "q": "stem cells"}, 5)
    assert run["e"] == [] and len(run["q"]) == 5
    assert len(hybrid.search([], 5)) == 0
