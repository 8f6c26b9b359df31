"""BM25-uni / BM25-bi (Luan et al. §6.1): wordpiece tokens, bigrams, against bm25s and a hand-computed BM25."""
from __future__ import annotations

import math

import bm25s
import numpy as np
import pytest
from transformers import AutoTokenizer

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.types import Document


@pytest.fixture(scope="module")
def tokenizer(tiny_backbone_dir):
    return AutoTokenizer.from_pretrained(tiny_backbone_dir)


def test_analyzer_adds_adjacent_bigrams(tokenizer):
    uni = wordpiece_analyzer(tokenizer)(["Vitamin D deficiency"])
    bi = wordpiece_analyzer(tokenizer, bigrams=True)(["Vitamin D deficiency"])
    assert uni == [["vitamin", "d", "deficiency"]]
    assert bi == [["vitamin", "d", "deficiency", "vitamin d", "d deficiency"]]


def test_bigrams_off_equals_bm25_uni_on_bm25s(tokenizer, mini_data):
    """With bigrams off the retriever is BM25-uni: bm25s over the tokenizer's own wordpieces."""
    documents = list(mini_data.corpus.values())
    ours = BM25Retriever.build(mini_data.corpus, analyzer=wordpiece_analyzer(tokenizer, bigrams=False),
                               show_progress=False)
    oracle = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    oracle.index([tokenizer.tokenize(d.full_text) for d in documents], show_progress=False)
    for query in mini_data.queries[:10]:
        expected = oracle.get_scores(tokenizer.tokenize(query.text))
        np.testing.assert_allclose(ours.score_all(tokenizer.tokenize(query.text)), expected, rtol=1e-6)
        run = ours.search([query], k=5, show_progress=False)
        order = np.lexsort((np.arange(len(documents)), -expected.astype(np.float32)))[:5]
        assert run.doc_ids(query.query_id) == [documents[i].doc_id for i in order]


def _lucene_bm25(query: list[str], docs: list[list[str]], k1: float = 0.9, b: float = 0.4) -> list[float]:
    n, avg = len(docs), sum(len(d) for d in docs) / len(docs)
    scores = []
    for doc in docs:
        total = 0.0
        for term in set(query):
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            if df and tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avg))
        scores.append(total)
    return scores


def test_bm25_bi_matches_hand_computed_scores(tokenizer):
    """Three documents sharing words but not word order: only bigrams separate 'vitamin d' from 'd vitamin'."""
    docs = [Document("a", "vitamin d deficiency"), Document("b", "d vitamin deficiency"),
            Document("c", "bone fracture risk")]
    analyze = wordpiece_analyzer(tokenizer, bigrams=True)
    bi = BM25Retriever.build(docs, analyzer=analyze, name="bm25-bi", show_progress=False)
    uni = BM25Retriever.build(docs, analyzer=wordpiece_analyzer(tokenizer), show_progress=False)
    query = "vitamin d"
    expected = _lucene_bm25(analyze([query])[0], analyze([d.text for d in docs]))
    run = bi.search({"q": query}, k=3, show_progress=False)
    assert run.name == "bm25-bi"
    assert [h.doc_id for h in run["q"]] == ["a", "b", "c"]
    np.testing.assert_allclose([h.score for h in run["q"]], expected, rtol=1e-5)
    assert expected[0] > expected[1] > 0
    uni_scores = [h.score for h in uni.search({"q": query}, k=2, show_progress=False)["q"]]
    assert uni_scores[0] == pytest.approx(uni_scores[1])  # same unigrams: a tie without bigrams


def test_analyzer_needs_a_tokenizer():
    with pytest.raises(TypeError, match="tokenize method"):
        wordpiece_analyzer(object())
    with pytest.raises(TypeError, match="analyzer must be a callable"):
        BM25Retriever.build([Document("a", "x")], analyzer="wordpiece", show_progress=False)
