from __future__ import annotations

import doctest
import logging
from pathlib import Path

import bm25s
import numpy as np
import pytest

import uhdsearch.baselines.bm25
from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.evaluation.datasets import BeirData, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.topk import top_k
from uhdsearch.types import Document, Query, Run


@pytest.fixture(scope="module")
def mini(scifact_mini_dir: Path) -> BeirData:
    return load_beir(scifact_mini_dir, split="test")


@pytest.fixture(scope="module")
def bm25(mini: BeirData) -> BM25Retriever:
    return BM25Retriever.build(mini.corpus, show_progress=False)


def test_scores_equal_bm25s_retrieve(mini: BeirData, bm25: BM25Retriever) -> None:
    # The oracle: bm25s used directly, as its README shows, with the same tokenization and parameters.
    texts = [d.full_text for d in mini.corpus.values()]
    reference = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    reference.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    query_tokens = bm25s.tokenize([q.text for q in mini.queries], stopwords="en", return_ids=False, show_progress=False)
    k = 50
    docs, scores = reference.retrieve(query_tokens, k=k, show_progress=False)
    run = bm25.search(mini.queries, k=k, show_progress=False)
    doc_ids = list(mini.corpus)
    for i, query in enumerate(mini.queries):
        hits = run[query.query_id]
        assert len(hits) == k
        ours = np.array([h.score for h in hits], dtype=np.float32)
        np.testing.assert_array_equal(ours, scores[i])
        # Same documents wherever bm25s's order is not decided by a tie.
        theirs = [doc_ids[j] for j in docs[i]]
        untied = [r for r in range(k) if np.sum(scores[i] == scores[i][r]) == 1]
        assert [hits[r].doc_id for r in untied] == [theirs[r] for r in untied]


def test_results_sorted_unique_and_tie_rule(mini: BeirData, bm25: BM25Retriever) -> None:
    position = {d: n for n, d in enumerate(mini.corpus)}
    run = bm25.search(mini.queries, k=400, show_progress=False)
    assert run.name == "bm25"
    assert list(run) == [q.query_id for q in mini.queries]
    for query_id, hits in run.results.items():
        ids = [h.doc_id for h in hits]
        assert len(ids) == len(set(ids)) == 400
        keys = [(-h.score, position[h.doc_id]) for h in hits]
        assert keys == sorted(keys), query_id
        assert hits[0].score > 0


def test_top_k_tie_rule_matches_full_sort() -> None:
    """BM25 ranks with the shared tie rule, zero scores included."""
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, 200).astype(np.float32)  # many ties
    full = sorted(range(200), key=lambda j: (-scores[j], j))
    for k in (1, 5, 37, 199, 200, 500):
        assert top_k(scores, k, positive_only=False)[0].tolist() == full[:k]


def test_k_larger_than_corpus_returns_every_document() -> None:
    small = BM25Retriever.build([Document("a", "cats purr"), Document("b", "dogs bark"), Document("c", "birds sing")],
                                show_progress=False)
    run = small.search({"q": "dogs and cats"}, k=1000, show_progress=False)
    # "and" is a stopword; a and b match one equally rare term each, so they tie and keep corpus order.
    assert [h.doc_id for h in run["q"]] == ["a", "b", "c"]
    assert run["q"][0].score == run["q"][1].score > 0
    assert run["q"][2].score == 0.0


def test_empty_queries_get_no_results_and_one_warning(bm25: BM25Retriever, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="uhdsearch.baselines.bm25"):
        run = bm25.search([Query("e1", ""), Query("ok", "cerebral white matter"), Query("e2", "  \t")], k=5,
                          show_progress=False)
    assert run["e1"] == [] and run["e2"] == []
    assert len(run["ok"]) == 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "2 of 3 queries are empty" in warnings[0].getMessage()


def test_no_queries_gives_empty_run(bm25: BM25Retriever) -> None:
    assert bm25.search({}, k=10, show_progress=False).results == {}


def test_query_without_known_terms_scores_zero(bm25: BM25Retriever) -> None:
    hits = bm25.search({"q": "the of and zzzqqqxx"}, k=3, show_progress=False)["q"]
    assert [h.score for h in hits] == [0.0, 0.0, 0.0]
    assert [h.doc_id for h in hits] == bm25.doc_ids[:3]


@pytest.mark.parametrize("k", [0, -5, 2.5, True])
def test_bad_k(bm25: BM25Retriever, k: object) -> None:
    with pytest.raises(ValueError, match=rf"k={k!r} must be a positive integer"):
        bm25.search({"q": "cells"}, k=k, show_progress=False)  # type: ignore[arg-type]


def test_accepts_mapping_and_sequence_corpus_and_queries(mini: BeirData, bm25: BM25Retriever) -> None:
    from_list = BM25Retriever.build(list(mini.corpus.values()), show_progress=False)
    query = mini.queries[3]
    a = bm25.search([query], k=10, show_progress=False)
    b = from_list.search({query.query_id: query.text}, k=10, show_progress=False)
    assert a.results == b.results


def test_stemmer_callable_is_applied_to_documents_and_queries() -> None:
    def strip_s(tokens: list[str]) -> list[str]:
        return [t[:-1] if t.endswith("s") else t for t in tokens]

    docs = [Document("a", "many cats"), Document("b", "one dog")]
    plain = BM25Retriever.build(docs, stopwords=None, show_progress=False)
    stemmed = BM25Retriever.build(docs, stopwords=None, stemmer=strip_s, show_progress=False)
    assert plain.search({"q": "cat"}, k=1, show_progress=False)["q"][0].score == 0.0
    assert stemmed.search({"q": "cat"}, k=1, show_progress=False)["q"][0].doc_id == "a"
    assert stemmed.search({"q": "cat"}, k=1, show_progress=False)["q"][0].score > 0


def test_pystemmer_by_name() -> None:
    pytest.importorskip("Stemmer")
    bm25 = BM25Retriever.build([Document("a", "running fast"), Document("b", "slow walk")], stemmer="porter",
                               show_progress=False)
    assert bm25.search({"q": "runs"}, k=1, show_progress=False)["q"][0].doc_id == "a"
    with pytest.raises(ValueError, match="stemmer='klingon' is not a PyStemmer algorithm"):
        BM25Retriever.build([Document("a", "x")], stemmer="klingon", show_progress=False)


def test_build_errors() -> None:
    with pytest.raises(ValueError, match="the corpus is empty"):
        BM25Retriever.build([], show_progress=False)
    with pytest.raises(ValueError, match="doc_id 'a' appears more than once"):
        BM25Retriever.build([Document("a", "x"), Document("a", "y")], show_progress=False)
    with pytest.raises(ValueError, match="corpus key 'x' differs from its Document's doc_id 'a'"):
        BM25Retriever.build({"x": Document("a", "x")}, show_progress=False)
    with pytest.raises(TypeError, match="expected Document records"):
        BM25Retriever.build(["plain text"], show_progress=False)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="b=1.5 must be between 0 and 1"):
        BM25Retriever.build([Document("a", "x")], b=1.5, show_progress=False)


def test_quality_on_scifact_mini(mini: BeirData, bm25: BM25Retriever) -> None:
    # 400 documents make retrieval easier than the full corpus; guards against a broken tokenization.
    scores = evaluate(bm25.search(mini.queries, k=100, show_progress=False), mini.qrels, ["nDCG@10", "R@100"])
    assert scores["nDCG@10"] > 0.85  # measured 0.8728
    assert scores["R@100"] > 0.95  # measured 0.975


def test_save_run_round_trip(tmp_path: Path, mini: BeirData, bm25: BM25Retriever) -> None:
    run = bm25.search(mini.queries[:5], k=20, show_progress=False)
    run.save(str(tmp_path / "bm25.trec"))
    loaded = Run.load(str(tmp_path / "bm25.trec"))
    for q in run:
        assert [h.score for h in loaded[q]] == [h.score for h in run[q]]


def test_docstring_examples() -> None:
    result = doctest.testmod(uhdsearch.baselines.bm25)
    assert result.attempted > 0
    assert result.failed == 0
