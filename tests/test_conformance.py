"""One conformance test over every retriever: Run shape, sorted scores, unique doc_ids, k, empty query list."""
import pytest

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.searcher import Searcher


@pytest.fixture(scope="module")
def retrievers(tiny_backbone_dir, tiny_encoder_session, mini_data, mini_encoding):
    ids = list(mini_data.corpus)
    digest = tiny_encoder_session.digest()
    return {
        "bm25": BM25Retriever.build(mini_data.corpus, show_progress=False),
        "dense": DenseRetriever.build(mini_data.corpus, backbone=tiny_backbone_dir, max_length=64,
                                      show_progress=False),
        "uhd-binary": Searcher(tiny_encoder_session, BinaryIndex.from_encoding(mini_encoding, ids, None, digest)),
        "uhd-weighted": Searcher(tiny_encoder_session, WeightedIndex.from_encoding(mini_encoding, ids, None, digest),
                                 "weighted"),
    }


@pytest.mark.parametrize("name", ["bm25", "dense", "uhd-binary", "uhd-weighted"])
@pytest.mark.parametrize("k", [1, 7, 1000])
def test_every_retriever_conforms(retrievers, mini_data, name, k):
    retriever = retrievers[name]
    queries = mini_data.queries[:8]
    run = retriever.search(queries, k=k)
    assert list(run) == [q.query_id for q in queries]
    corpus = set(mini_data.corpus)
    for q in queries:
        hits = run[q.query_id]
        assert 0 < len(hits) <= min(k, len(corpus))
        ids = [h.doc_id for h in hits]
        assert len(set(ids)) == len(ids) and set(ids) <= corpus
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    assert len(retriever.search([], k=k)) == 0
