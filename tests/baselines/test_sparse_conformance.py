"""The shared conformance test (tests/test_conformance.py) over the sparse family and the fusions."""
import pytest
from transformers import AutoTokenizer

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.baselines.hybrid import HybridRetriever
from uhdsearch.baselines.splade import SpladeRetriever

NAMES = ["bm25-uni", "bm25-bi", "splade-tiny", "hybrid", "rrf"]


@pytest.fixture(scope="module")
def retrievers(tiny_backbone_dir, mini_data):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_dir)
    corpus = dict(list(mini_data.corpus.items())[:80])  # SPLADE encodes every document: keep it small
    uni = BM25Retriever.build(corpus, analyzer=wordpiece_analyzer(tokenizer), show_progress=False)
    bi = BM25Retriever.build(corpus, analyzer=wordpiece_analyzer(tokenizer, True), show_progress=False)
    splade = SpladeRetriever.build(corpus, model_dir=tiny_backbone_dir, max_length=64)
    return corpus, {"bm25-uni": uni, "bm25-bi": bi, "splade-tiny": splade,
                    "hybrid": HybridRetriever(splade, bi, weight=0.3, depth=5),
                    "rrf": HybridRetriever(splade, uni, method="rrf", depth=5)}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("k", [1, 7, 1000])
def test_every_sparse_retriever_conforms(retrievers, mini_data, name, k):
    corpus, systems = retrievers
    retriever = systems[name]
    queries = mini_data.queries[:8]
    run = retriever.search(queries, k=k)
    assert list(run) == [q.query_id for q in queries]
    for q in queries:
        hits = run[q.query_id]
        assert 0 < len(hits) <= min(k, len(corpus))
        ids = [h.doc_id for h in hits]
        assert len(set(ids)) == len(ids) and set(ids) <= set(corpus)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    assert len(retriever.search([], k=k)) == 0
